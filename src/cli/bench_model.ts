/**
 * `npm run bench -- model --device profile.json [--plans dp2,pp2-1f1b] [--steps 6] [--gpu auto|wgpu|dawn]`: the
 * performance model held to this machine (docs/design.md#a-performance-model-that-chooses-the-plan). Each small plan
 * trains for a few steps on worker ranks (`npm run train`'s CLI in a subprocess, as a user runs it); the measured
 * step time, the median `ms_per_step` of its metrics.jsonl after the first step (pipeline compilation), is printed
 * beside step_time.ts predictStep's price of the same flags on `--device` (src/cli/plan.ts fixedPlanPrice, what
 * `npm run plan -- … --device` prints) and their ratio. A benchmark: it prints figures and asserts none.
 * All ranks share this host's cores and its one software adapter, which the model does not know: a world of w ranks
 * gets about 2/w of the cores the calibration had on a 2-core machine.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { fixedPlanPrice } from './plan.ts';
import { table } from '../bench/table.ts';

// Four layers so pp 2 with 2 chunks per rank divides them; 2 heads so tp 2 and cp 2 split them.
const SHAPE = ['--n-layer', '4', '--n-embd', '32', '--n-head', '2', '--block-size', '32', '--batch-size', '8'];
const QUIET = ['--eval-interval', '100000', '--eval-batches', '1', '--sample-tokens', '0', '--log-interval', '1'];
const PP = (s: string) => ['--pp', '2', '--pp-schedule', s, '--micro-batches', '4'];

/** The small plans, by name: every dimension and schedule, worlds of 2 to 4 ranks. */
export const MODEL_PLANS: Record<string, string[]> = {
  dp2: ['--dp', '2'],
  'dp2-zero1': ['--dp', '2', '--zero', '1'],
  'dp2-zero3': ['--dp', '2', '--zero', '3'],
  tp2: ['--tp', '2'],
  'tp2-sp': ['--tp', '2', '--sp'],
  cp2: ['--cp', '2'],
  'pp2-gpipe': PP('gpipe'),
  'pp2-1f1b': PP('1f1b'),
  'pp2-interleaved': [...PP('interleaved'), '--virtual-stages', '2'],
  'pp2-zb-h1': PP('zb-h1'),
  'dp2-ep2': ['--dp', '2', '--ep', '2', '--arch', 'gpt-moe', '--n-expert', '2'],
  'dp2-tp2': ['--dp', '2', '--tp', '2'],
};

/** One plan's row: measured and predicted ms per step (predicted null when the model does not price it, with why). */
export interface ModelRow {
  plan: string;
  measuredMs: number;
  predictedMs: number | null;
  note?: string;
}

const root = new URL('../../', import.meta.url).pathname;

/** Median `ms_per_step` after step 0 of a `npm run train` of `flags`. @throws Error with the run's stderr tail. */
async function measureSteps(flags: string[], steps: number, gpu: string): Promise<number> {
  const out = await Deno.makeTempDir({ prefix: 'bench-model-' });
  try {
    const r = await new Deno.Command(Deno.execPath(), {
      args: ['run', '-A', 'src/cli/train.ts', ...flags, '--steps', String(steps), '--out', out, `--gpu=${gpu}`],
      cwd: root,
      env: { XDG_RUNTIME_DIR: '/tmp' },
      stdout: 'piped',
      stderr: 'piped',
    }).output();
    if (r.code !== 0) {
      throw new Error(`train ${flags.join(' ')} failed:\n${new TextDecoder().decode(r.stderr).slice(-1500)}`);
    }
    const ms = (await Deno.readTextFile(`${out}/metrics.jsonl`)).split('\n').filter(Boolean).map((l) => JSON.parse(l))
      .filter((o) => typeof o.ms_per_step === 'number' && o.step >= 1).map((o) => o.ms_per_step as number)
      .sort((a, b) => a - b);
    if (!ms.length) throw new Error(`train ${flags.join(' ')}: no step after the first in metrics.jsonl`);
    return ms[ms.length >> 1];
  } finally {
    await Deno.remove(out, { recursive: true });
  }
}

/**
 * Runs the named plans and returns their rows, logging the table as it goes.
 * @throws Error for a failed run (a plan the predictor refuses gets a note instead).
 */
export async function benchModel(
  o: { device: string; plans: string[]; steps: number; gpu: string },
  log: (line: string) => void,
): Promise<ModelRow[]> {
  const rows: ModelRow[] = [];
  for (const name of o.plans) {
    const flags = [...MODEL_PLANS[name], ...SHAPE, ...QUIET];
    let predictedMs: number | null = null, note: string | undefined;
    try {
      predictedMs = (await fixedPlanPrice([...flags, '--device', o.device]))!.step * 1e3;
    } catch (e) {
      note = (e as Error).message.split(' (')[0];
    }
    rows.push({ plan: name, measuredMs: await measureSteps(flags, o.steps, o.gpu), predictedMs, note });
    log(`measured ${name}`);
  }
  return rows;
}

/** The table: measured, predicted, predicted/measured, and whether within 25 %; then the count within. */
export function modelTable(rows: ModelRow[]): string {
  const f = (x: number) => (x >= 100 ? x.toFixed(0) : x.toPrecision(3));
  const priced = rows.filter((r) => r.predictedMs !== null);
  const within = priced.filter((r) => Math.abs(r.predictedMs! / r.measuredMs - 1) <= 0.25);
  return [
    table(
      ['plan', 'measured ms/step', 'predicted ms/step', 'predicted/measured', 'within 25 %'],
      rows.map((r) =>
        r.predictedMs === null ? [r.plan, f(r.measuredMs), '-', '-', `not priced: ${r.note}`] : [
          r.plan,
          f(r.measuredMs),
          f(r.predictedMs),
          `${(r.predictedMs / r.measuredMs).toFixed(2)}×`,
          Math.abs(r.predictedMs / r.measuredMs - 1) <= 0.25 ? 'yes' : 'no',
        ]
      ),
    ),
    `${within.length} of ${priced.length} priced plans within 25 % of the measured step time`,
  ].join('\n');
}

const HELP = `npm run bench -- model --device FILE.json|NAME [--plans ${Object.keys(MODEL_PLANS).join(',')}]
  [--steps N (default 6)] [--gpu auto|wgpu|dawn]
  measured step time of small plans on worker ranks beside predictStep's price on --device
  (calibrate first: npm run plan -- --calibrate --out profile.json)`;

/** The `model` suite's CLI; returns the exit code. */
export async function modelMain(argv: string[]): Promise<number> {
  let v;
  try {
    v = parseCliArgs({
      args: argv,
      options: {
        device: { type: 'string' },
        plans: { type: 'string' },
        steps: { type: 'string', default: '6' },
        gpu: { type: 'string', default: 'auto' },
        help: { type: 'boolean', default: false },
      },
      strict: true,
      allowPositionals: false,
    }).values;
    if (v.help) {
      console.log(HELP);
      return 0;
    }
    if (!v.device) throw new Error('--device FILE.json|NAME is required');
    const plans = v.plans?.split(',').map((s) => s.trim()) ?? Object.keys(MODEL_PLANS);
    const bad = plans.filter((p) => !(p in MODEL_PLANS));
    if (bad.length) {
      throw new Error(`unknown plan(s) ${bad.join(', ')}; allowed: ${Object.keys(MODEL_PLANS).join(', ')}`);
    }
    const steps = Number(v.steps);
    if (!Number.isInteger(steps) || steps < 2) throw new Error(`--steps must be an integer ≥ 2, got '${v.steps}'`);
    const rows = await benchModel({ device: v.device, plans, steps, gpu: v.gpu }, console.log);
    console.log(`\nshape ${SHAPE.join(' ')}; median ms/step of steps 1…${steps - 1}; --device ${v.device}`);
    console.log(modelTable(rows));
    return 0;
  } catch (e) {
    console.error(`bench model: ${(e as Error).message}`);
    return 2;
  }
}
