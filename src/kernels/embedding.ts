/**
 * GPT-2's input layer: token embedding plus learned position embedding,
 * out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] (Radford et al. 2019; llm.c encoder_forward /
 * encoder_backward). The backward avoids float atomics with a token index sorted on the CPU,
 * so each dwte element is summed by the one invocation that owns it.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { expectDtype, expectSize } from './reduce.ts';

const NAN_BITS = 0x7fc00000;

/**
 * Occurrences of one token that a single dispatch sums per invocation. lavapipe stops an
 * invocation after 65 535 loop iterations (see reduce.ts LAVAPIPE_LOOP_CAP); this leaves room
 * for the ≤ 32 bisection steps, and tokens more frequent than this take several dispatches.
 */
const MAX_RUN = 32768;

/** Where each token id occurs in a batch, for {@link embeddingBackward}. */
export interface TokenIndex {
  /** (V+1) u32: token v occurs at positions[offsets[v] .. offsets[v+1]); offsets[V] = B·T. */
  offsets: Tensor;
  /** (B·T) u32: flat positions b·T + t, grouped by token id (ascending within a token). */
  positions: Tensor;
  /** Occurrences of the most frequent token, when known (buildTokenIndex sets it); lets the
   * backward skip the extra dispatches that batches over 32768 tokens otherwise need. */
  maxCount?: number;
  /** Releases both tensors. */
  release(): void;
}

function checkInt(fn: string, name: string, v: number, min: number): void {
  if (!Number.isInteger(v) || v < min) {
    throw new Error(`${fn}: ${name} must be an integer ≥ ${min}, got ${v}`);
  }
}

/**
 * out = wte[tokens] + wpe[0..T), row by row.
 * @param tokens (B, T) i32 token ids in [0, V); an id out of range cannot be reported from the
 *   GPU and turns its output row into NaN
 * @param wte (V, C) token embedding, @param wpe (Tmax, C) position embedding, T ≤ Tmax
 * @param out (B, T, C) output
 * @throws Error naming the tensor whose size, shape or dtype does not match, or when T > Tmax;
 *   DeviceLimitError when B or T is over maxComputeWorkgroupsPerDimension (65 535): the grid
 *   is (C/64, T, B) so that no invocation divides.
 */
export function embeddingForward(
  gpu: Gpu,
  tokens: Tensor,
  wte: Tensor,
  wpe: Tensor,
  out: Tensor,
  b: number,
  t: number,
): void {
  const fn = 'embeddingForward';
  const { c, v } = checkShapes(fn, wte, wpe, b, t);
  expectSize(fn, 'tokens', tokens, b * t, `(B=${b}, T=${t})`);
  expectDtype(fn, 'tokens', tokens, 'i32');
  expectSize(fn, 'out', out, b * t * c, `(B=${b}, T=${t}, C=${c})`);
  if (b * t * c === 0) return;
  gpu.dispatch(
    { key: 'embedding.fwd', code: gpu.shaders.embedding, entryPoint: 'fwd' },
    [tokens, wte, wpe, out, undefined, undefined, undefined, undefined, undefined], // binding 9: params
    new Uint32Array([b * t, t, c, v, 0, 0, NAN_BITS, 0]),
    [Math.ceil(c / 64), t, b],
  );
}

function checkShapes(
  fn: string,
  wte: Tensor,
  wpe: Tensor,
  b: number,
  t: number,
): { c: number; v: number } {
  checkInt(fn, 'b', b, 0);
  checkInt(fn, 't', t, 0);
  if (wte.shape.length !== 2) throw new Error(`${fn}: wte must be (V, C), got [${wte.shape}]`);
  if (wpe.shape.length !== 2) throw new Error(`${fn}: wpe must be (Tmax, C), got [${wpe.shape}]`);
  const [v, c] = wte.shape;
  const [tmax, cp] = wpe.shape;
  if (cp !== c) {
    throw new Error(
      `${fn}: wpe must have C=${c} columns like wte [${wte.shape}], got [${wpe.shape}]`,
    );
  }
  if (t > tmax) {
    throw new Error(`${fn}: T=${t} exceeds the ${tmax} positions of wpe [${wpe.shape}]`);
  }
  return { c, v };
}

/**
 * Counting sort of the batch's token ids on the CPU: for each id v, the flat positions where
 * it occurs. Uploads the result; release it after the backward.
 * @param tokens (B·T) token ids, row-major (b, t)
 * @param vocabSize V
 * @throws Error naming the first id outside [0, V) and its position.
 */
export function buildTokenIndex(gpu: Gpu, tokens: Int32Array, vocabSize: number): TokenIndex {
  checkInt('buildTokenIndex', 'vocabSize', vocabSize, 1);
  const counts = new Uint32Array(vocabSize + 1);
  for (let i = 0; i < tokens.length; i++) {
    const id = tokens[i];
    if (!(id >= 0 && id < vocabSize)) {
      throw new Error(
        `buildTokenIndex: token id ${id} at position ${i} is outside the vocabulary [0, ${vocabSize})`,
      );
    }
    counts[id + 1]++;
  }
  let maxCount = 0;
  for (let v = 0; v < vocabSize; v++) {
    maxCount = Math.max(maxCount, counts[v + 1]);
    counts[v + 1] += counts[v];
  }
  const offsets = counts; // now exclusive prefix sums: offsets[v] = start of token v's run
  const fill = offsets.slice(0, vocabSize);
  const positions = new Uint32Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) positions[fill[tokens[i]]++] = i;
  const tOffsets = gpu.upload(offsets, [vocabSize + 1], 'u32', 'tokenIndex.offsets');
  const tPositions = gpu.upload(positions, [tokens.length], 'u32', 'tokenIndex.positions');
  return {
    offsets: tOffsets,
    positions: tPositions,
    maxCount,
    release() {
      tOffsets.release();
      tPositions.release();
    },
  };
}

/**
 * dwte[v] += Σ_{(b,t): tokens[b,t] = v} dout[b, t] and dwpe[t] += Σ_b dout[b, t] for t < T;
 * rows of dwpe from T on and rows of dwte of absent tokens are not written.
 * dwte takes a grid over (v, c) when V ≤ B·T, else over (sorted slot, c) so GPT-2's 50257-row
 * table costs B·T·C invocations, not V·C.
 * @param index from {@link buildTokenIndex} for this batch's tokens (V+1 offsets, B·T positions)
 * @param dout (B, T, C) upstream gradient
 * @param dwte (V, C) +=, @param dwpe (Tmax, C) +=
 * @throws Error naming the tensor whose size or shape does not match.
 */
export function embeddingBackward(
  gpu: Gpu,
  index: TokenIndex,
  dout: Tensor,
  dwte: Tensor,
  dwpe: Tensor,
  b: number,
  t: number,
): void {
  const fn = 'embeddingBackward';
  const { c, v } = checkShapes(fn, dwte, dwpe, b, t);
  const bt = b * t;
  expectSize(fn, 'dout', dout, bt * c, `(B=${b}, T=${t}, C=${c})`);
  expectSize(fn, 'index.offsets', index.offsets, v + 1, `(V+1=${v + 1}) for dwte [${dwte.shape}]`);
  expectSize(fn, 'index.positions', index.positions, bt, `(B·T=${bt})`);
  expectDtype(fn, 'index.offsets', index.offsets, ['u32', 'i32']);
  expectDtype(fn, 'index.positions', index.positions, ['u32', 'i32']);
  if (bt * c === 0) return;
  const code = gpu.shaders.embedding;
  const u = undefined;
  gpu.dispatch(
    { key: 'embedding.wpe_bwd', code, entryPoint: 'wpe_bwd' },
    [u, u, u, u, u, u, dout, u, dwpe],
    new Uint32Array([bt, t, c, v, 0, 0, NAN_BITS, 0]),
    grid1d(t * c, 256),
  );
  const bySlot = v > bt;
  const entry = bySlot ? 'wte_slots' : 'wte_vocab';
  const maxCount = Math.min(bt, index.maxCount ?? bt);
  // Ordered dispatches add disjoint ranges of each token's occurrences: no two invocations
  // of one dispatch write the same element, so no atomics are needed.
  for (let lo = 0; lo === 0 || lo < maxCount; lo += MAX_RUN) {
    gpu.dispatch(
      { key: `embedding.${entry}`, code, entryPoint: entry },
      [u, u, u, u, index.offsets, index.positions, dout, dwte, u],
      new Uint32Array([bt, t, c, v, lo, lo + MAX_RUN, NAN_BITS, 0]),
      grid1d((bySlot ? bt : v) * c, 256),
    );
  }
}
