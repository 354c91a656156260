// Reductions shared by the row kernels (layernorm.wgsl, rmsnorm.wgsl, softmax_xent.wgsl) and
// the column-sum passes (those and reduce.wgsl). Included with `//!include row_reduce`; never
// compiled on its own.
//
// Row reductions: `lanes` consecutive invocations (a power of two dividing the workgroup size,
// itself at most ROW_WG_MAX) share one row, each holding a partial value. A workgroup-memory
// tree with halving strides (sequential addressing, Harris, "Optimizing Parallel Reduction in
// CUDA", NVIDIA 2007) leaves the total in the row's first slot, which every lane reads. The
// pairing order depends only on `lanes` and is the one each kernel's own tree used before they
// shared this file, so their results kept their bits. With lanes = 1 (what CPU adapters get:
// barriers cost them as much as the row's arithmetic) the value comes back with no barrier.
//
// Column sums: without float atomics a sum over rows that many workgroups would share is cut
// into partial sums over chunks of rows, one invocation owning each (chunk, column) output
// (docs/design.md §9); chunk_column is that grid's indexing.

// Workgroup size of the column-sum passes; the TS side launches them with grid1d(…, 256).
const COL_WG: u32 = 256u;

// Largest workgroup of a row kernel (reduce.ts rowKernel: WG ≤ 256), so the workspace needs
// no constant from the including shader.
const ROW_WG_MAX: u32 = 256u;

// vec2 so LayerNorm reduces both moments at once; scalar callers use .x (the tree adds the
// components independently, so .x is what a scalar tree would give).
var<workgroup> row_red: array<vec2<f32>, ROW_WG_MAX>;

// Sum (is_max false) or maximum (is_max true) of v over the `lanes` invocations of lid's row,
// returned to all of them. It has barriers, so it must be called in uniform control flow with
// a uniform `lanes`: rows past the end take part with neutral values (0 for sums, a large
// negative for maxima).
fn lanes_reduce(lid: u32, v: vec2<f32>, lanes: u32, is_max: bool) -> vec2<f32> {
  if (lanes == 1u) {
    return v;
  }
  row_red[lid] = v;
  workgroupBarrier();
  let lane = lid % lanes;
  for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
    if (lane < s) {
      let o = row_red[lid + s];
      row_red[lid] = select(row_red[lid] + o, max(row_red[lid], o), is_max);
    }
    workgroupBarrier();
  }
  let total = row_red[lid - lane];
  // The next call overwrites row_red: every lane must have read its total first.
  workgroupBarrier();
  return total;
}

fn row_sum(lid: u32, v: f32, lanes: u32) -> f32 {
  return lanes_reduce(lid, vec2<f32>(v, 0.0), lanes, false).x;
}

fn row_sum2(lid: u32, v: vec2<f32>, lanes: u32) -> vec2<f32> {
  return lanes_reduce(lid, v, lanes, false);
}

fn row_max(lid: u32, v: f32, lanes: u32) -> f32 {
  return lanes_reduce(lid, vec2<f32>(v, 0.0), lanes, true).x;
}

// The output that invocation `i` of a partial column-sum grid owns: column `col` of chunk k,
// whose rows are [r0, r1) of an (n, c) matrix cut into chunks of `chunk` rows; i = k·c + col.
struct ChunkColumn {
  live: bool,    // false past the last (chunk, column): the invocation must do nothing
  i: u32,
  col: u32,
  r0: u32,
  r1: u32,
}

// For a COL_WG-wide 2D grid (grid1d): i = gid.x + gid.y · groups.x · COL_WG. Column fastest, so
// neighbouring invocations read neighbouring floats.
fn chunk_column(gid: vec3<u32>, groups: vec3<u32>, n: u32, c: u32, chunk: u32) -> ChunkColumn {
  let i = gid.x + gid.y * groups.x * COL_WG;
  let chunks = (n + chunk - 1u) / chunk;
  let k = i / c;
  let r0 = k * chunk;
  return ChunkColumn(i < chunks * c, i, i % c, r0, min(n, r0 + chunk));
}
