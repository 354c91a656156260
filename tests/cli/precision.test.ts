/**
 * `--precision` end to end through the CLI (docs/design.md §25): a tiny run in f16-mixed and in
 * bf16-mixed reaches a validation loss within 2% of the same run in f32; a f16-mixed run killed
 * and resumed from a checkpoint continues the loss scale exactly (its overflows and doublings
 * replay step for step); an adapter without shader-f16 refuses f16-mixed with one clear line.
 */
import { equal, match, ok } from 'node:assert/strict';
import { runCli } from '../util/cli.ts';
import { testGpu } from '../util/gpu.ts';

const hasF16 = (await testGpu()).features.has('shader-f16');
const TINY = ['--steps', '150', '--eval-interval', '150', '--log-interval', '50', '--sample-tokens', '0'];
const opts = { sanitizeResources: false, sanitizeOps: false };

/** The last val_loss of a run directory's metrics.jsonl. */
async function valLoss(dir: string): Promise<number> {
  const lines = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
  const v = lines.filter((o) => typeof o.val_loss === 'number').at(-1)?.val_loss;
  ok(typeof v === 'number', `${dir}: no val_loss`);
  return v;
}

async function train(args: string[]): Promise<{ dir: string; code: number; stdout: string; stderr: string }> {
  const dir = await Deno.makeTempDir();
  return { dir, ...(await runCli('train.ts', [...args, '--out', dir])) };
}

Deno.test({
  name: 'a tiny run in f16-mixed and bf16-mixed ends within 2% of the f32 run’s val loss',
  ...opts,
  fn: async () => {
    const f32 = await train(TINY);
    equal(f32.code, 0, f32.stderr);
    const ref = await valLoss(f32.dir);
    for (const precision of ['bf16-mixed', 'f16-mixed']) {
      const r = await train([...TINY, '--precision', precision]);
      if (precision === 'f16-mixed' && !hasF16) {
        ok(r.code !== 0, 'refused');
        match(
          r.stderr,
          /--precision f16-mixed: f16 tensors need the adapter's 'shader-f16' feature, .* use f32 or bf16-mixed/,
        );
        continue;
      }
      equal(r.code, 0, r.stderr);
      const v = await valLoss(r.dir);
      ok(Math.abs(v - ref) <= 0.02 * ref, `${precision} val loss ${v} vs f32 ${ref}`);
      if (precision === 'f16-mixed') match(r.stdout, /\| loss scale 65536/);
    }
  },
});

Deno.test({
  name: 'f16-mixed: a resumed run replays the loss scale (overflows, halvings, doublings) exactly',
  ignore: !hasF16,
  ...opts,
  fn: async () => {
    // From 2^22 with a window of 2 the scale overflows, halves and grows again within 16 steps.
    const args = [
      ...['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16', '--batch-size', '4'],
      ...['--steps', '16', '--log-interval', '1', '--eval-interval', '1000', '--eval-batches', '1'],
      ...['--sample-tokens', '0', '--warmup', '2', '--precision', 'f16-mixed', '--loss-scale', '4194304'],
      ...['--loss-scale-window', '2', '--ckpt-interval', '8', '--ckpt-schedule', 'pythia'],
    ];
    const full = await train(args);
    equal(full.code, 0, full.stderr);
    const b = await Deno.makeTempDir();
    for await (const e of Deno.readDir(full.dir)) await Deno.copyFile(`${full.dir}/${e.name}`, `${b}/${e.name}`);
    const resumed = await runCli('train.ts', ['--out', b, '--resume', '--resume-step', '8']);
    equal(resumed.code, 0, resumed.stderr);
    const rows = async (dir: string) =>
      (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l))
        .filter((o) => typeof o.loss === 'number').map((o) => [o.step, o.loss, o.loss_scale, o.skipped]);
    const want = await rows(full.dir), got = await rows(b);
    equal(got.length, 16);
    ok(
      want.slice(8).some((r) => r[3]) && want.slice(8).some((r) => !r[3]),
      'steps 8…15 hold overflows and clean steps',
    );
    ok(new Set(want.slice(8).map((r) => r[2])).size > 1, 'and the scale changes within them');
    for (let s = 8; s < 16; s++) {
      equal(JSON.stringify(got[s].slice(2)), JSON.stringify(want[s].slice(2)), `step ${s}: loss scale and skip`);
      ok(Math.abs(got[s][1] - want[s][1]) <= 1e-5 * want[s][1], `step ${s}: loss ${got[s][1]} vs ${want[s][1]}`);
    }
  },
});
