/**
 * `npm run plan -- --search --world N --model <preset|dims> [--device P] [--net M] [--global-batch B]`
 * and `npm run plan -- --advise <preset|dims> [--tp T] [--micro-batch b] [--device P]`: the
 * performance model choosing a plan and criticising a shape (docs/design.md#a-performance-model-that-chooses-the-plan).
 * Flags are PlanSearchSchema's (src/cli/command.ts), read by flags.ts like every other CLI's; src/cli/plan.ts hands
 * argv here when it names --search or --advise and is otherwise unchanged.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { type PlanSearchOptions, PlanSearchSchema } from './command.ts';
import { flagKeys, helpLines, parseArgsOptions, readFlag } from './flags.ts';
import { NetworkModel } from '../comm/network.ts';
import { makePlan, rankParams } from '../parallel/plan/plan.ts';
import { fmtBytes, pct, table } from '../perf/plan_report.ts';
import { type DeviceProfile, deviceProfile, peakFlops } from '../perf/device_profile.ts';
import { parseModel } from '../perf/model_presets.ts';
import { searchPlans, type SearchResult, shortPlan, whyBest } from '../perf/plan_search.ts';
import { MAX_PRICED_PLANS } from '../perf/plan_space.ts';
import { bandLine } from '../perf/plan_order.ts';
import { adviseShape } from '../perf/shape_advice.ts';

const KEYS = flagKeys(PlanSearchSchema);

export const SEARCH_HELP =
  `npm run plan -- --search --world N --model <preset|dims> [flags]   rank every valid plan by predicted step time
npm run plan -- --advise <preset|dims> [--tp T] [--micro-batch b] [--device P]    name the shape choices that waste the device

${helpLines(KEYS).join('\n')}`;

/** True when `argv` asks for the search or the advice rather than one plan's report. */
export const isSearchArgv = (argv: string[]) =>
  argv.some((a) => a === '--search' || a.startsWith('--search=') || a === '--advise' || a.startsWith('--advise='));

/**
 * PlanSearchSchema's values from `argv` (strict: an unknown flag is an error naming the ones accepted).
 * @throws Error naming the flag and what it accepts.
 */
export function parseSearchArgs(argv: string[]): PlanSearchOptions & { help: boolean } {
  let parsed;
  try {
    parsed = parseCliArgs({
      args: argv,
      options: { ...parseArgsOptions(KEYS), help: { type: 'boolean' } },
      strict: true,
      allowPositionals: false,
    });
  } catch (e) {
    throw new Error(
      `${(e as Error).message.split('\n')[0]}; --search / --advise take: ${KEYS.map((k) => `--${k.flag}`).join(', ')}`,
    );
  }
  const values: Record<string, unknown> = {}, raw = parsed.values as Record<string, string | boolean | undefined>;
  for (const k of KEYS) {
    const v = raw[k.flag], no = raw[`no-${k.flag}`];
    if (v !== undefined) values[k.key] = readFlag(k, v, false, true);
    else if (no !== undefined) values[k.key] = readFlag(k, true, true, true);
  }
  return { ...PlanSearchSchema.parse(values), help: !!raw.help };
}

/** FLOP/s in TFLOP/s, or GFLOP/s below one TFLOP/s (a measured lavapipe profile). */
const fmtFlops = (x: number) => (x >= 1e12 ? `${(x / 1e12).toFixed(1)} TFLOP/s` : `${(x / 1e9).toFixed(1)} GFLOP/s`);

/** One line on the device: peak, memory, source. */
const deviceLine = (dev: DeviceProfile, dtype: 'bf16' | 'f32') =>
  `${dev.name}: ${fmtFlops(peakFlops(dev, dtype))} ${dtype} dense, ${(dev.memoryBytes / 2 ** 30).toFixed(0)} GiB, ${
    (dev.memBandwidth / 1e9).toFixed(0)
  } GB/s (${dev.source})`;

/**
 * --search or --advise without printing: the text, and for --search the search's result (its work: `priced`).
 * @throws Error naming a missing or bad flag, or why no plan is valid or fits (searchPlans).
 */
export async function planSearchRun(argv: string[]): Promise<{ text: string; result?: SearchResult }> {
  const f = parseSearchArgs(argv);
  if (f.help) return { text: SEARCH_HELP };
  if (f.search && f.advise !== undefined) throw new Error('--search and --advise are separate commands; give one');
  const dev = await deviceProfile(f.device);
  return f.advise !== undefined ? { text: advise(f, dev) } : search(f, dev);
}

/** Runs --search or --advise; returns the printed text. @throws as {@link planSearchRun}. */
export async function planSearchMain(argv: string[]): Promise<string> {
  const { text } = await planSearchRun(argv);
  console.log(text);
  return text;
}

function search(f: PlanSearchOptions, dev: DeviceProfile): { text: string; result: SearchResult } {
  if (f.world === undefined) throw new Error('--search needs --world N (the ranks to plan for)');
  if (f.model === undefined) throw new Error('--search needs --model <preset|dims>');
  const preset = parseModel(f.model), model = { ...preset, batchSize: f.globalBatch ?? preset.batchSize };
  const net = NetworkModel.parse(f.net);
  const r = searchPlans({ model, world: f.world, dev, net, dtype: f.dtype, attention: f.attention, band: f.band });
  const params = rankParams(makePlan(), model, 0).dense;
  const gib = (b: number) => (b / 2 ** 30).toFixed(1);
  const rows = r.ranked.slice(0, f.top).map((c, i) => {
    const x = c.prediction, by = (d: 'dp' | 'tp' | 'pp' | 'cp') => fmtBytes(Math.round(x.bytes[d]));
    return [
      `${i + 1}. ${shortPlan(c, model)}`,
      x.step.toFixed(3),
      c.equivalent ? '≈ best' : '',
      x.tflops >= 1 ? x.tflops.toFixed(1) : x.tflops.toPrecision(2),
      pct(x.mfu),
      `${gib(x.memory.total)} (${gib(x.memory.states)} + ${gib(x.memory.activations)})`,
      by('dp'),
      by('tp'),
      by('pp'),
      by('cp'),
      pct(x.bubbleFraction),
    ];
  });
  const text = [
    `search   ${preset.name}: ${model.nLayer} layers · ${model.nHead} heads · hidden ${model.nEmbd} · seq ${model.blockSize} · vocab ${model.vocabSize} · ${
      params >= 1e9 ? `${(params / 1e9).toFixed(1)}B` : `${(params / 1e6).toFixed(1)}M`
    } parameters · global batch ${model.batchSize} on ${f.world} ranks`,
    `device   ${deviceLine(dev, f.dtype)} · ${f.attention} attention`,
    `network  ${f.net} (${net})`,
    `plans    ${r.enumerated.toLocaleString('en-US')} enumerated, ${r.valid.toLocaleString('en-US')} valid, ${
      r.overMemory.toLocaleString('en-US')
    } over ${gib(dev.memoryBytes)} GiB dropped, ${r.ranked.length.toLocaleString('en-US')} ranked in ${
      (r.ms / 1e3).toFixed(2)
    } s`,
    ...(r.thinned
      ? [
        `thinned  micro-batch counts: ${r.thinned.kept} of up to ${r.thinned.most} per split kept (spread evenly), so ${
          r.priced.toLocaleString('en-US')
        } of the ${r.valid.toLocaleString('en-US')} valid plans were priced (the bound is ${
          MAX_PRICED_PLANS.toLocaleString('en-US')
        })`,
      ]
      : []),
    `order    ${bandLine(r.equivalent, r.ranked.length, r.band)}`,
    '',
    table(
      [
        'plan (best first)',
        'step s',
        'band',
        'TFLOP/s/GPU',
        'MFU',
        'memory GiB (states + act.)',
        'dp bytes',
        'tp bytes',
        'pp bytes',
        'cp bytes',
        'bubble',
      ],
      rows,
    ),
    '',
    `  bytes: what the critical rank (first of the last stage) sends per step; MFU counts model FLOPs (6N + 12·L·h·T per token) over ${
      fmtFlops(peakFlops(dev, f.dtype))
    }`,
    whyBest(r, model),
  ].join('\n');
  return { text, result: r };
}

function advise(f: PlanSearchOptions, dev: DeviceProfile): string {
  const model = parseModel(f.advise!);
  const o = { dtype: f.dtype, recompute: 'none' as const, attention: f.attention };
  const found = adviseShape(model, f.tp, f.microBatch, dev, o);
  const head =
    `advise   ${model.name}: ${model.nLayer} layers · ${model.nHead} heads · hidden ${model.nEmbd} · seq ${model.blockSize} · vocab ${model.vocabSize} · tp ${f.tp} · micro-batch ${f.microBatch} on ${
      deviceLine(dev, f.dtype)
    }`;
  if (!found.length) {
    return `${head}\n  no wasteful shape choice found: every GEMM dimension is whole tiles, heads are 64-wide`;
  }
  return [
    head,
    ...found.map((a) =>
      `  ${a.what}: ${a.problem} → ${a.fix}${
        a.gain === undefined
          ? ' (the current shape cannot run with this tp)'
          : ` (predicted ${a.gain >= 0 ? '+' : ''}${(a.gain * 100).toFixed(1)}% achieved FLOP/s)`
      }`
    ),
  ].join('\n');
}
