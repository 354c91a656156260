/**
 * The `decode` benchmark (docs/design.md#tree-attention-decoding): tree vs ring decode attention across a cp group on
 * in-process ranks (src/comm/local.ts) over a modelled network. For each context length T and cp,
 * every rank holds a contiguous shard of the KV cache of every layer; per (token, layer) it
 * computes its partial and the group merges them (src/models/tree_decode.ts). Reported per token:
 * the latency on the simulated clock (the slowest rank), the bytes each rank sends (from the trace,
 * checked against decodeCombineBytes), and each rank's peak memory (KV shard, score scratch,
 * partials).
 *
 * Compute is modelled, not measured: a partial reads its shard's K and V once (decoding is
 * bandwidth-bound, docs/design.md#decoding-with-a-kv-cache), so it advances the rank's clock by 2·B·len·C·4 bytes / the
 * memory bandwidth `hbmGBps`. The values are real: each rank's partial (f64 reference, over random K, V, q shared by
 * every layer and token) is computed once per (T, cp) and merged for real, and every rank's output is compared with the
 * single-rank result. Only attention is modelled: projections, MLP and kernel launches are left out, which is what cp
 * changes.
 */
import { closeLocalWorld, localWorld, onEveryRank } from '../comm/local.ts';
import { NetworkModel } from '../comm/network.ts';
import { traceTotals } from '../comm/trace.ts';
import { decodePartialRef, mergePartialsRef } from '../reference/decode_attention.ts';
import {
  type DecodeCombine,
  decodeCombine,
  decodeCombineBytes,
  decodeShard,
  emptyPartial,
  type PartialDims,
} from '../models/tree_decode.ts';
import { Random } from '../util/random.ts';

/** What one run of the decode benchmark covers. */
export interface DecodeBenchOptions {
  /** Context lengths T (positions cached before the new token). */
  lens: number[];
  /** cp group sizes (1 … 16). */
  cps: number[];
  /** Network model text (parseNetwork). */
  net: string;
  layers: number;
  heads: number;
  headSize: number;
  /** Decoded tokens per measurement (the clock's total is divided by it). */
  tokens: number;
  /** Memory bandwidth of one rank, GB/s: the modelled time of a partial. */
  hbmGBps: number;
}

/** One (T, cp, method) measurement. */
export interface DecodeBenchRow {
  method: DecodeCombine;
  t: number;
  cp: number;
  /** µs per token on the simulated clock (slowest rank; all layers). */
  usPerToken: number;
  /** Of which modelled compute of the partials (µs per token). */
  computeUsPerToken: number;
  /** Bytes the busiest rank sends per token (all layers), from the trace. */
  bytesPerToken: number;
  /** Bytes per token if the KV shards travelled instead (the paper's ring attention; formula). */
  kvRingBytesPerToken: number;
  /** Peak bytes per rank: the KV shard of every layer, the score scratch and the merge's buffers. */
  peakBytes: number;
  /** Of which the KV shard of every layer and the kernel's score scratch (floats). */
  kvBytes: number;
  scoreFloats: number;
  /** Largest |y_rank − y_single| over ranks and elements. */
  maxAbsDiff: number;
}

/**
 * Default options: a tiny model's head count, contexts 1k, 8k, 32k, cp 1 … 16 (16: where the tree pays off,
 * docs/design.md#tree-attention-decoding).
 */
export const DECODE_BENCH_DEFAULTS: DecodeBenchOptions = {
  lens: [1024, 8192, 32768],
  cps: [1, 2, 4, 8, 16],
  net: 'intra=300GB/s,1us;inter=25GB/s,5us;node=4',
  layers: 4,
  heads: 4,
  headSize: 64,
  tokens: 2,
  hbmGBps: 3000,
};

function randomArray(n: number, seed: number): Float32Array {
  const r = new Random(seed), out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = 2 * r.uniform() - 1;
  return out;
}

/** Floats the merge holds at once per rank (B·nh rows): tree partial, m, [ℓ, o], merged, y; ring partial, accumulator, the one in flight, y. */
function mergeFloats(method: DecodeCombine, d: PartialDims): number {
  const rows = d.b * d.nh, w = d.hs + 2;
  return method === 'tree' ? rows * (w + 1 + (w - 1) + w + d.hs) : rows * (3 * w + d.hs);
}

/**
 * Runs the benchmark: every (T, cp) for both methods.
 * @throws Error for a bad network text, a cp outside 1 … 16, or when a rank's traced bytes differ
 *   from decodeCombineBytes (the formula of docs/design.md#tree-attention-decoding) or its output from the single-rank
 *   one.
 */
export async function benchDecode(o: DecodeBenchOptions, log: (line: string) => void): Promise<DecodeBenchRow[]> {
  const net = NetworkModel.parse(o.net);
  const b = 1, nh = o.heads, hs = o.headSize, c = nh * hs, d: PartialDims = { b, nh, hs };
  const rows: DecodeBenchRow[] = [];
  for (const t of o.lens) {
    const k = randomArray(b * nh * t * hs, t), v = randomArray(b * nh * t * hs, t + 1);
    const q = randomArray(b * 3 * c, t + 2).map((x) => 4 * x); // scores of a few units: a peaked softmax
    const single = mergePartialsRef([decodePartialRef(q, k, v, { b, c, nh, tMax: t, len: t })], b, nh, hs);
    for (const cp of o.cps) {
      const shards = [...Array(cp).keys()].map((r) => decodeShard(t, cp, r));
      const partials = shards.map(({ start, len }) => {
        if (!len) return emptyPartial(d);
        const view = (x: Float32Array) => {
          const out = new Float32Array(b * nh * len * hs);
          for (let r = 0; r < b * nh; r++) {
            out.set(x.subarray((r * t + start) * hs, (r * t + start + len) * hs), r * len * hs);
          }
          return out;
        };
        return Float32Array.from(decodePartialRef(q, view(k), view(v), { b, c, nh, tMax: len, len }));
      });
      const maxLen = Math.max(...shards.map((s) => s.len));
      const computeUs = (len: number) => (2 * b * len * c * 4) / (o.hbmGBps * 1e3);
      for (const method of ['tree', 'ring'] as DecodeCombine[]) {
        const world = localWorld(cp, { net, trace: true });
        let maxAbsDiff = 0;
        try {
          await onEveryRank(world, async (comm) => {
            for (let tok = 0; tok < o.tokens; tok++) {
              for (let l = 0; l < o.layers; l++) {
                comm.transport.clock.compute(computeUs(shards[comm.rank].len));
                const y = await decodeCombine(method, comm, partials[comm.rank], d);
                for (let i = 0; i < y.length; i++) maxAbsDiff = Math.max(maxAbsDiff, Math.abs(y[i] - single[i]));
              }
            }
          });
          const sent = traceTotals(world.flatMap((w) => w.tracer.spans)).bytesByRank;
          for (let r = 0; r < cp; r++) {
            const want = o.tokens * o.layers * decodeCombineBytes(method, d, cp, r);
            if ((sent[r] ?? 0) !== want) {
              throw new Error(`bench decode: ${method} rank ${r} sent ${sent[r] ?? 0} bytes, formula ${want}`);
            }
          }
          if (!(maxAbsDiff < 1e-4)) throw new Error(`bench decode: ${method} cp=${cp} T=${t} is off by ${maxAbsDiff}`);
          const kvBytes = 2 * o.layers * b * maxLen * c * 4;
          rows.push({
            method,
            t,
            cp,
            usPerToken: Math.max(...world.map((w) => w.transport.clock.now)) / o.tokens,
            computeUsPerToken: o.layers * computeUs(maxLen),
            bytesPerToken: Math.max(...Object.values(sent), 0) / o.tokens,
            kvRingBytesPerToken: o.layers * (cp - 1) * 2 * b * maxLen * c * 4,
            peakBytes: kvBytes + 4 * b * nh * maxLen + 4 * mergeFloats(method, d),
            kvBytes,
            scoreFloats: b * nh * maxLen,
            maxAbsDiff,
          });
        } finally {
          closeLocalWorld(world);
        }
      }
      log(`  T=${t} cp=${cp} done`);
    }
  }
  return rows;
}
