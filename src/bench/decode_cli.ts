/**
 * `npm run bench -- decode [flags]`: tree vs ring decode attention across a cp group on the
 * simulated clock (src/bench/decode.ts, docs/design.md#tree-attention-decoding). Own flags, no GPU, as `comm`.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { NetworkModel } from '../comm/network.ts';
import { writeAtomic } from '../io/atomic.ts';
import { benchDecode, DECODE_BENCH_DEFAULTS, type DecodeBenchOptions, type DecodeBenchRow } from './decode.ts';
import { fmt, table } from './table.ts';

const D = DECODE_BENCH_DEFAULTS;

export const DECODE_HELP = `Usage: npm run bench -- decode [options]

Tree vs ring decode attention across a context-parallel group of in-process ranks
(docs/design.md#tree-attention-decoding): per-token latency on the simulated clock, bytes per token, peak memory per rank.

Options:
  --net SPEC        network model (preset or text; default ${D.net}), see
                    docs/design.md#the-network-model-the-simulated-clock-and-collective-costs
  --lens LIST       context lengths (default ${D.lens.join(',')})
  --cp LIST         cp group sizes, 1 … 16 (default ${D.cps.join(',')})
  --layers N        attention layers (default ${D.layers})
  --heads N         heads (default ${D.heads})
  --head-size N     head size (default ${D.headSize})
  --tokens N        decoded tokens per measurement (default ${D.tokens})
  --hbm GBPS        memory bandwidth of a rank, GB/s: the modelled time of a partial (default ${D.hbmGBps})
  --json FILE       also write the results as JSON
  -h, --help        this text`;

function ints(flag: string, text: string, max = Infinity): number[] {
  const xs = text.split(',').map((s) => (/^\d+$/.test(s.trim()) ? Number(s.trim()) : NaN));
  if (!xs.length || xs.some((x) => !Number.isInteger(x) || x < 1 || x > max)) {
    throw new Error(`--${flag} expects comma-separated integers in 1 … ${max}, got '${text}'`);
  }
  return xs;
}

/**
 * Parses the decode suite's flags.
 * @throws Error for an unknown flag, a bad list or number, or a network text parseNetwork refuses.
 */
export function parseDecodeArgs(argv: string[]): DecodeBenchOptions & { json?: string; help: boolean } {
  let parsed;
  try {
    parsed = parseCliArgs({
      args: argv,
      options: {
        net: { type: 'string', default: D.net },
        lens: { type: 'string', default: D.lens.join(',') },
        cp: { type: 'string', default: D.cps.join(',') },
        layers: { type: 'string', default: String(D.layers) },
        heads: { type: 'string', default: String(D.heads) },
        'head-size': { type: 'string', default: String(D.headSize) },
        tokens: { type: 'string', default: String(D.tokens) },
        hbm: { type: 'string', default: String(D.hbmGBps) },
        json: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    });
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const v = parsed.values;
  const one = (flag: string, text: string, max = Infinity) => ints(flag, text, max)[0];
  NetworkModel.parse(v.net); // refuses a bad text here, before any work
  const hbm = Number(v.hbm);
  if (!(hbm > 0) || !/^[\d.e+]+$/.test(v.hbm)) throw new Error(`--hbm expects a positive GB/s figure, got '${v.hbm}'`);
  return {
    net: v.net,
    lens: ints('lens', v.lens),
    cps: ints('cp', v.cp, 16),
    layers: one('layers', v.layers),
    heads: one('heads', v.heads),
    headSize: one('head-size', v['head-size']),
    tokens: one('tokens', v.tokens),
    hbmGBps: hbm,
    json: v.json,
    help: v.help,
  };
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(bytes < 10 * 1024 ? 2 : 1)}`;

/** The side-by-side table: one line per (T, cp), tree and ring columns. */
export function decodeTable(rows: DecodeBenchRow[]): string {
  const lines = rows.filter((r) => r.method === 'tree').map((tr) => {
    const ri = rows.find((r) => r.method === 'ring' && r.t === tr.t && r.cp === tr.cp)!;
    return [
      String(tr.t),
      String(tr.cp),
      fmt(tr.computeUsPerToken),
      fmt(tr.usPerToken),
      fmt(ri.usPerToken),
      `${(ri.usPerToken / tr.usPerToken).toFixed(2)}×`,
      kb(tr.bytesPerToken),
      kb(ri.bytesPerToken),
      kb(ri.kvRingBytesPerToken),
      (tr.peakBytes / 2 ** 20).toFixed(2),
      `${tr.peakBytes - tr.kvBytes - 4 * tr.scoreFloats} / ${ri.peakBytes - ri.kvBytes - 4 * ri.scoreFloats}`,
    ];
  });
  return table(
    [
      'T',
      'cp',
      'compute µs',
      'tree µs/tok',
      'ring µs/tok',
      'ring/tree',
      'tree KiB/tok',
      'ring KiB/tok',
      'KV-ring KiB/tok',
      'peak MiB/rank',
      'merge B tree/ring',
    ],
    lines,
  );
}

/** `npm run bench -- decode …`; returns the exit code (2 for bad flags). */
export async function decodeMain(argv: string[]): Promise<number> {
  let o;
  try {
    o = parseDecodeArgs(argv);
  } catch (e) {
    console.error(`bench decode: ${(e as Error).message}`);
    return 2;
  }
  if (o.help) {
    console.log(DECODE_HELP);
    return 0;
  }
  console.log(
    `== decode: tree vs ring decode attention, ${o.layers} layers × ${o.heads} heads of ${o.headSize}, B = 1, net ${o.net}, ${o.hbmGBps} GB/s per rank`,
  );
  const t0 = performance.now();
  const rows = await benchDecode(o, console.log);
  console.log(decodeTable(rows));
  console.log(
    `per token, all layers; µs on the simulated clock (slowest rank); KiB sent by the busiest rank (trace = formula); KV-ring: the paper's ring baseline moving KV shards (formula). ${
      ((performance.now() - t0) / 1e3).toFixed(1)
    } s wall`,
  );
  const { json, help: _, ...opts } = o;
  const out = JSON.stringify({ suite: 'decode', ...opts, date: new Date().toISOString(), rows }, null, 2);
  if (json) await writeAtomic(json, new TextEncoder().encode(out + '\n'));
  return 0;
}
