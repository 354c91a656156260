/**
 * `npm run bench -- model`: runs small plans on worker ranks and prints measured beside predicted step time (a
 * benchmark: the figures are not asserted, only that the run happens and the columns and counts are printed).
 */
import { equal, match, ok } from 'node:assert/strict';
import { modelTable } from '../../src/cli/bench_model.ts';

const root = new URL('../../', import.meta.url).pathname;

async function bench(args: string[]) {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ['run', '-A', 'src/cli/bench.ts', 'model', ...args],
    cwd: root,
    env: { XDG_RUNTIME_DIR: '/tmp' },
    stdout: 'piped',
    stderr: 'piped',
  }).output();
  return { code: r.code, out: new TextDecoder().decode(r.stdout), err: new TextDecoder().decode(r.stderr) };
}

// The dense row (dp2: measured, predicted, their ratio) is the documented command's check (tests/util/doc_rules.ts);
// here the MoE plan, which is measured but not priced, so one training run covers what the doc rule does not.
Deno.test('bench model: a MoE plan is measured and says why it is not priced; the columns and the count are printed', async () => {
  const r = await bench(['--device', 'cpu-lavapipe', '--plans', 'dp2-ep2', '--steps', '2']);
  equal(r.code, 0, r.err);
  match(r.out, /plan +measured ms\/step +predicted ms\/step +predicted\/measured +within 25 %/);
  match(r.out, /^dp2-ep2 +\d[\d.]* +- +- +not priced: the step-time model prices dense GPT plans only/m);
  match(r.out, /^0 of 0 priced plans within 25 % of the measured step time$/m);
});

Deno.test('bench model: an unknown plan is refused naming the allowed ones', async () => {
  const r = await bench(['--device', 'cpu-lavapipe', '--plans', 'dp3']);
  equal(r.code, 2);
  match(r.err, /unknown plan\(s\) dp3; allowed: dp2, .*pp2-zb-h1/);
});

Deno.test('modelTable counts the priced plans within 25 %', () => {
  const t = modelTable([
    { plan: 'a', measuredMs: 100, predictedMs: 120 },
    { plan: 'b', measuredMs: 100, predictedMs: 70 },
    { plan: 'c', measuredMs: 100, predictedMs: null, note: 'why' },
  ]);
  ok(t.includes('1 of 2 priced plans within 25 %'), t);
  match(t, /^b +100 +70\.0 +0\.70× +no$/m);
});
