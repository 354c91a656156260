/**
 * One global batch, however it is split (data/dataset.ts, docs/design.md#batch-order): the
 * hybrid model trained through the CLI as `--dp 2 --pp 2 --micro-batches 2` (4 worker ranks) and
 * as the single-rank `--grad-accum 2` both follow the plain single-rank run of the same global
 * batch of 8 rows within 1e-4 relative for 10 steps, and report its validation loss: the same rows
 * in every split, only the float summation order differs.
 */
import { equal, ok } from 'node:assert/strict';
import { lossSeries, runCli } from '../util/cli.ts';

/** Small shapes as the parity tests' (tests/parallel/harness.ts tinyConfig, arch_parity's hybrid). */
const HYBRID = [
  ...['--arch', 'hybrid', '--n-layer', '2', '--n-head', '2', '--n-embd', '16', '--attn-every', '1'],
  ...['--d-state', '4', '--expand', '2', '--d-conv', '4', '--block-size', '16', '--steps', '10'],
  ...['--warmup', '2', '--lr', '1e-2', '--min-lr', '1e-3', '--grad-clip', '0.5', '--eval-batches', '2'],
  ...['--eval-interval', '1000', '--log-interval', '1', '--sample-tokens', '0'],
];

/** Step losses and the final validation loss of one CLI run. */
async function train(...flags: string[]): Promise<{ losses: number[]; val: number }> {
  const dir = await Deno.makeTempDir({ prefix: 'global-batch-' });
  const r = await runCli('train.ts', [...HYBRID, ...flags, '--out', dir]);
  equal(r.code, 0, r.stderr + r.stdout);
  const losses = await lossSeries(`${dir}/metrics.jsonl`);
  const vals = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l))
    .filter((o) => typeof o.val_loss === 'number');
  equal(vals.length, 1, 'one validation, after the last step');
  await Deno.remove(dir, { recursive: true });
  return { losses, val: vals[0].val_loss };
}

Deno.test({
  name: 'hybrid --dp 2 --pp 2 --micro-batches 2 and --grad-accum 2 follow the plain run of the same global batch',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const plain = await train('--batch-size', '8');
    equal(plain.losses.length, 10);
    const runs: [string, string[]][] = [
      ['--grad-accum 2', ['--batch-size', '4', '--grad-accum', '2']],
      ['--dp 2 --pp 2 --micro-batches 2', ['--batch-size', '8', '--dp', '2', '--pp', '2', '--micro-batches', '2']],
    ];
    for (const [what, flags] of runs) {
      const got = await train(...flags);
      equal(got.losses.length, 10, what);
      got.losses.forEach((l, s) => {
        const ref = plain.losses[s];
        ok(Math.abs(l - ref) <= 1e-4 * ref, `${what} step ${s}: loss ${l} vs plain ${ref}`);
      });
      ok(Math.abs(got.val - plain.val) <= 1e-4 * plain.val, `${what}: val loss ${got.val} vs plain ${plain.val}`);
    }
  },
});
