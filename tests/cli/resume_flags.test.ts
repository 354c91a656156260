/**
 * `npm run train -- … --resume` in subprocesses, as a user re-runs a command: the run's own
 * command with `--resume` appended continues it (every flag equals the saved value), a
 * resumable change (--steps) trains on, and a real change is one error line naming the flag,
 * the saved and the given value.
 */
import { equal, match } from 'node:assert/strict';
import { readLosses, runCli, TINY_RUN } from '../util/cli.ts';

Deno.test({
  name: 'train --resume: the same flags are accepted, --steps continues, a changed --seed or --n-layer is refused',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'resume-flags-' });
    try {
      const command = [...TINY_RUN, '--seed', '7', '--out', `${dir}/run`];
      const first = await runCli('train.ts', [...command, '--steps', '2']);
      equal(first.code, 0, first.stderr);
      const same = await runCli('train.ts', [...command, '--steps', '2', '--resume']);
      equal(same.code, 0, `the same command with --resume appended: ${same.stderr}`);
      match(same.stdout, /resuming at step 2/);
      const longer = await runCli('train.ts', [...command, '--steps', '3', '--resume']);
      equal(longer.code, 0, longer.stderr);
      equal([...(await readLosses(`${dir}/run/metrics.jsonl`)).keys()].join(), '0,1,2');
      for (
        const [flag, given, saved] of [['--seed', '8', '7'], ['--n-layer', '2', '1']] as const
      ) {
        const changed = await runCli('train.ts', [...command, flag, given, '--steps', '4', '--resume']);
        equal(changed.code, 1, changed.stderr);
        match(
          changed.stderr.trim(),
          new RegExp(
            `^error: --resume continues the saved config; these flags would change it: ${flag} ${given} \\(saved ${saved}\\) \\(a resume may change: --steps`,
          ),
        );
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
