// Row reductions shared by the row kernels (layernorm.wgsl, rmsnorm.wgsl, softmax_xent.wgsl):
// the workgroup-memory tree every adapter runs. Included with `//!include row_reduce`; never
// compiled on its own. Where the device has `subgroups`, reduce.ts swaps this file's text for
// row_reduce_sg.wgsl, which defines the same structs and functions (docs/design.md#row-reductions).
//
// `lanes` consecutive invocations (a power of two dividing the workgroup size, itself at most
// ROW_WG_MAX) share one row, each holding a partial value. A workgroup-memory tree with
// halving strides (sequential addressing, Harris, "Optimizing Parallel Reduction in CUDA",
// NVIDIA 2007) leaves the total in the row's first slot, which every lane reads. The pairing
// order depends only on `lanes` and is the one each kernel's own tree used before they shared
// this file, so their results kept their bits. With lanes = 1 (what CPU adapters get: barriers
// cost them as much as the row's arithmetic) the value comes back with no barrier.

// Entry-point inputs of a row kernel, split in two because WGSL's uniformity analysis counts a
// struct as uniform only when all its members are: RowGroup's are (the subgroup variant adds
// subgroup_size and branches on it around barriers), RowLane's are not.
struct RowLane {
  @builtin(local_invocation_index) lid: u32,
}

struct RowGroup {
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
}

// Largest workgroup of a row kernel (reduce.ts rowKernel: WG ≤ 256), so the workspace needs
// no constant from the including shader.
const ROW_WG_MAX: u32 = 256u;

// vec2 so LayerNorm reduces both moments at once; scalar callers use .x (the tree adds the
// components independently, so .x is what a scalar tree would give).
var<workgroup> row_red: array<vec2<f32>, ROW_WG_MAX>;

// Sum (is_max false) or maximum (is_max true) of v over the `lanes` invocations of the
// caller's row, returned to all of them. It has barriers, so it must be called in uniform
// control flow with a uniform `lanes`: rows past the end take part with neutral values (0 for
// sums, a large negative for maxima).
fn lanes_reduce(at: RowLane, v: vec2<f32>, lanes: u32, is_max: bool) -> vec2<f32> {
  if (lanes == 1u) {
    return v;
  }
  let lid = at.lid;
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

// The three reductions the kernels call; `wg` is unused here and drives the subgroup variant.
fn row_sum(at: RowLane, wg: RowGroup, v: f32, lanes: u32) -> f32 {
  return lanes_reduce(at, vec2<f32>(v, 0.0), lanes, false).x;
}

fn row_sum2(at: RowLane, wg: RowGroup, v: vec2<f32>, lanes: u32) -> vec2<f32> {
  return lanes_reduce(at, v, lanes, false);
}

fn row_max(at: RowLane, wg: RowGroup, v: f32, lanes: u32) -> f32 {
  return lanes_reduce(at, vec2<f32>(v, 0.0), lanes, true).x;
}
