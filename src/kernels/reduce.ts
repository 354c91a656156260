/**
 * Reductions over the rows of a matrix (bias gradients) and the helpers the row-wise
 * kernels (layernorm, cross-entropy) share. No float atomics exist in WGSL, so a sum over
 * rows that many workgroups would share is split into partial sums over chunks of rows
 * (a grid that owns each (chunk, column)) and a pass that owns each column
 * (docs/design.md#webgpu-limits-that-shape-the-kernels).
 */
import type { Gpu, KernelCode } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';

/**
 * Rows per partial-sum chunk. Columns × chunks invocations keep a CPU adapter's cores busy
 * at C = 64 and N = 8192 (8192 invocations) while the finishing pass loops over few chunks.
 */
export const ROWS_PER_CHUNK = 64;

/**
 * Invocations that share one row in a row kernel on a GPU: a power of two in [1, 256], about
 * one per `perLane` elements, so short rows (C = 64, V = 65) do not leave most of a
 * workgroup idle and long rows (V = 50257) get a full workgroup.
 */
export function rowLanes(rowLength: number, perLane: number): number {
  let lanes = 1;
  while (lanes < 256 && lanes * perLane < rowLength) lanes *= 2;
  return lanes;
}

/**
 * Overrides the row-kernel choice (tests use it to exercise the multi-lane path on CPU
 * adapters). `lanes: null` restores the automatic choice; `subgroups: false` forces the
 * workgroup-memory reductions on a device that has subgroups, so tests can run both.
 */
export const rowTuning: { lanes: number | null; subgroups: boolean } = { lanes: null, subgroups: true };

/** The shaders whose row reductions come from shaders/row_reduce.wgsl. */
export type RowShader = 'layernorm' | 'softmax_xent' | 'rmsnorm';

/**
 * Whether row reductions on `gpu` use subgroup operations (shaders/row_reduce_sg.wgsl): the
 * device has the `subgroups` feature, the context asked for them (`Gpu.subgroups`) and
 * {@link rowTuning} does not force the fallback.
 */
export function subgroupRows(gpu: Gpu): boolean {
  return rowTuning.subgroups && gpu.subgroups;
}

/**
 * Shader `name` with its row reductions taken from row_reduce_sg.wgsl instead of
 * row_reduce.wgsl when `subgroups` is true, and the suffix of its pipeline keys ('.sg' or '').
 * The variant is fixed here, at pipeline creation, so a kernel never branches on it.
 * @throws Error when the shader does not include row_reduce (nothing to swap).
 */
export function rowReduceShader(gpu: Gpu, name: RowShader, subgroups: boolean): { code: string; suffix: string } {
  const code = gpu.shaders[name];
  if (!code.includes(gpu.shaders.row_reduce)) {
    throw new Error(`rowReduceShader: shaders/${name}.wgsl does not include row_reduce`);
  }
  if (!subgroups) return { code, suffix: '' };
  // `enable` must come before every declaration. A function replacement, so no `$` in the
  // WGSL is read as a replacement pattern.
  const sg = code.replace(gpu.shaders.row_reduce, () => gpu.shaders.row_reduce_sg);
  return { code: `enable subgroups;\n${sg}`, suffix: '.sg' };
}

/**
 * Mesa's llvmpipe (lavapipe) stops every invocation after 65 535 loop iterations in total,
 * silently (its LP_MAX_TGSI_LOOP_ITERATIONS guard; measured: a loop to 70 000 returns after
 * 65 535, two loops of 60 000 after 65 534 together). SwiftShader has no such cap. Kernels
 * keep each invocation's total iterations below it: row kernels on CPU adapters share rows
 * longer than this many elements between lanes, so their two passes stay under 2·4096.
 */
export const LAVAPIPE_LOOP_CAP = 65535;
const CPU_ROW_LIMIT = 4096;

/**
 * Whether the adapter is a CPU rasteriser. There one invocation per row wins: workgroup
 * barriers cost lavapipe about as much as the row's arithmetic and SwiftShader 5–30× more
 * (measured, layernorm forward at N = 4096, C = 64…384).
 */
export function isCpuAdapter(gpu: Gpu): boolean {
  return gpu.isCpu;
}

/**
 * The row kernel `entry` of shader `name`, specialised with LANES invocations per row and WG
 * per workgroup, plus the number of rows each workgroup covers. Rows of several lanes reduce
 * with subgroup operations where {@link subgroupRows} allows (key suffix '.sg').
 * @throws Error when a CPU adapter cannot loop over rows this long, or `rowTuning.lanes` is
 *   not a power of two in [1, 256].
 */
export function rowKernel(
  gpu: Gpu,
  name: RowShader,
  entry: string,
  rowLength: number,
  perLane: number,
): { kernel: KernelCode; rowsPerGroup: number } {
  let lanes: number;
  let wg: number;
  if (rowTuning.lanes !== null) [lanes, wg] = [rowTuning.lanes, 256];
  else if (isCpuAdapter(gpu)) {
    // Rows over CPU_ROW_LIMIT elements are split between lanes, which keeps each invocation's
    // two passes under lavapipe's loop cap; 64 rows per workgroup so that N = 768 rows still
    // spread over the cores.
    lanes = rowLanes(rowLength, CPU_ROW_LIMIT);
    wg = Math.max(64, lanes);
    if (2 * Math.ceil(rowLength / lanes) + 16 > LAVAPIPE_LOOP_CAP) {
      throw new Error(
        `${name}.${entry}: rows of ${rowLength} elements exceed what a CPU adapter's invocation can loop over ` +
          `(lavapipe stops at ${LAVAPIPE_LOOP_CAP} iterations; at most ${256 * 32000} elements per row)`,
      );
    }
  } else [lanes, wg] = [rowLanes(rowLength, perLane), 256];
  if (!(lanes >= 1 && lanes <= wg && (lanes & (lanes - 1)) === 0)) {
    throw new Error(`rowKernel: lanes must be a power of two in [1, ${wg}], got ${lanes}`);
  }
  // One lane per row reduces nothing, so it keeps the tree's pipeline (no barrier either way).
  const { code, suffix } = rowReduceShader(gpu, name, lanes > 1 && subgroupRows(gpu));
  return {
    kernel: {
      key: `${name}.${entry}.L${lanes}.W${wg}${suffix}`,
      code: specialise(code, { LANES: `${lanes}u`, WG: `${wg}u` }),
      entryPoint: entry,
    },
    rowsPerGroup: wg / lanes,
  };
}

/**
 * Workgroups for a (rows × cols) grid of one invocation per element: x covers the columns in
 * workgroups of `wgx`, y the rows, and z splits rows beyond 65 535 (the per-dimension limit);
 * shaders take `col = gid.x`, `row = gid.y + gid.z · groups.y`. No invocation needs an integer
 * division, which CPU adapters cannot vectorise.
 */
export function rowsGrid(rows: number, cols: number, wgx: number): [number, number, number] {
  const z = Math.ceil(rows / 65535);
  return [Math.ceil(cols / wgx), Math.ceil(rows / z), z];
}

/**
 * (N, C) of a row kernel's input: C is the last dimension and N the product of the others
 * (0 when C is 0), so any (…, C) shape works as (N, C).
 * @throws Error naming `fn` and `name` when the tensor has no dimensions.
 */
export function rowShape(fn: string, name: string, x: Tensor): [number, number] {
  if (x.shape.length < 1) {
    throw new Error(`${fn}: ${name} must have at least one dimension, got [${x.shape}]`);
  }
  const c = x.shape[x.shape.length - 1];
  return [c === 0 ? 0 : x.size / c, c];
}

/**
 * `t`'s tensors in the order of a shader's binding names (binding i = names[i]; missing ones
 * leave holes), ready for gpu.dispatch, which puts the params at names.length.
 */
export function bindingSlots<K extends string>(
  names: readonly K[],
  t: Partial<Record<NoInfer<K>, Tensor>>,
): (Tensor | undefined)[] {
  return names.map((name) => t[name]);
}

/** Throws when `t` does not hold `expected` elements, naming the tensor and both shapes. */
export function expectSize(
  fn: string,
  name: string,
  t: Tensor,
  expected: number,
  shape: string,
): void {
  if (t.size !== expected) {
    throw new Error(
      `${fn}: ${name} must be ${shape} (${expected} elements), got [${t.shape}] (${t.size})`,
    );
  }
}

/** Throws when `t` is not of `dtype`. */
export function expectDtype(fn: string, name: string, t: Tensor, dtype: string | string[]): void {
  const ok = Array.isArray(dtype) ? dtype.includes(t.dtype) : t.dtype === dtype;
  if (!ok) throw new Error(`${fn}: ${name} must have dtype ${dtype}, got ${t.dtype}`);
}

/**
 * db (C) += Σ_rows dy (N, C): the bias gradient of y = x·W + b. Up to {@link ROWS_PER_CHUNK}
 * rows take one pass owning each column; more take a partial pass over chunks of rows into
 * a pooled temporary and a second pass that adds the chunk sums into db.
 * @throws Error when dy does not hold n·c elements or db does not hold c.
 */
export function columnSum(gpu: Gpu, dy: Tensor, db: Tensor, n: number, c: number): void {
  for (const [name, v] of [['n', n], ['c', c]] as const) {
    if (!Number.isInteger(v) || v < 0) {
      throw new Error(`columnSum: ${name} must be a non-negative integer, got ${v}`);
    }
  }
  expectSize('columnSum', 'dy', dy, n * c, `(n=${n}, c=${c})`);
  expectSize('columnSum', 'db', db, c, `(c=${c})`);
  if (n === 0 || c === 0) return;
  if (n <= ROWS_PER_CHUNK) {
    addColumnSums(gpu, dy, db, n, c);
    return;
  }
  const chunks = Math.ceil(n / ROWS_PER_CHUNK);
  const part = gpu.empty([chunks, c], 'f32', 'columnSum.partials');
  gpu.dispatch(
    colsumKernel(gpu),
    [dy, part],
    new Uint32Array([n, c, ROWS_PER_CHUNK, 0]),
    grid1d(chunks * c, 256),
  );
  addColumnSums(gpu, part, db, chunks, c);
  // Safe at once: later users of the buffer are encoded after these dispatches.
  part.release();
}

function colsumKernel(gpu: Gpu): KernelCode {
  return { key: 'reduce.colsum', code: gpu.shaders.reduce, entryPoint: 'colsum' };
}

/**
 * out (c) += Σ_rows part (rows, c), one invocation per column summing the rows in order: the
 * finishing pass of every chunked sum over rows ({@link columnSum}, the layernorm and rmsnorm
 * dw/db partials). `part` and `out` must lie in distinct buffers (WebGPU forbids binding one
 * buffer both read-only and writable in a dispatch).
 * @param part (rows, c) partial sums, @param out (c) +=
 * @throws Error when part does not hold rows·c elements or out does not hold c.
 */
export function addColumnSums(gpu: Gpu, part: Tensor, out: Tensor, rows: number, c: number): void {
  expectSize('addColumnSums', 'part', part, rows * c, `(rows=${rows}, c=${c})`);
  expectSize('addColumnSums', 'out', out, c, `(c=${c})`);
  if (rows === 0 || c === 0) return;
  gpu.dispatch(colsumKernel(gpu), [part, out], new Uint32Array([rows, c, rows, 1]), grid1d(c, 256));
}

/** Most workgroups of {@link countNonFinite}: 65 536 invocations, each looping over n / 65 536 elements (far under lavapipe's cap for any bindable buffer). */
const MAX_COUNT_GROUPS = 256;

/**
 * count[0] (u32) += the number of elements of `x` that are ±Inf or NaN, in one pass with no
 * readback: calls on several tensors add into the same counter, so a caller checks a whole
 * training state with one read. Reference: src/reference/reduce.ts `countNonFiniteRef`.
 * @param x f32 tensor of any shape (a slice of a flat buffer counts only its own elements)
 * @param count (≥ 1) u32 counter, in another buffer than x
 * @throws Error when x is not f32, count is not u32, or they share one buffer.
 */
export function countNonFinite(gpu: Gpu, x: Tensor, count: Tensor): void {
  expectDtype('countNonFinite', 'x', x, 'f32');
  expectDtype('countNonFinite', 'count', count, 'u32');
  if (count.size < 1) throw new Error('countNonFinite: count must hold at least one element');
  if (x.buffer === count.buffer) {
    throw new Error(
      'countNonFinite: x and count share one GPUBuffer; WebGPU cannot bind it read-only and writable at once',
    );
  }
  if (x.size === 0) return;
  const groups = Math.max(1, Math.min(MAX_COUNT_GROUPS, Math.ceil(x.size / (256 * 16))));
  gpu.dispatch(
    { key: 'reduce.count_nonfinite', code: gpu.shaders.reduce, entryPoint: 'count_nonfinite' },
    [x, undefined, undefined, count],
    new Uint32Array([x.size, 0, 0, 0]),
    [groups],
  );
}
