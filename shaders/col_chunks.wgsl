// Column sums shared by the norms' partial-sum passes (layernorm.wgsl, rmsnorm.wgsl) and
// reduce.wgsl. Included with `//!include col_chunks`; never compiled on its own.
//
// Without float atomics a sum over rows that many workgroups would share is cut into partial
// sums over chunks of rows, one invocation owning each (chunk, column) output
// (docs/design.md#webgpu-limits-that-shape-the-kernels); chunk_column is that grid's indexing.

// Workgroup size of the column-sum passes; the TS side launches them with grid1d(…, 256).
const COL_WG: u32 = 256u;

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
