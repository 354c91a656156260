// Row reductions with subgroup operations: the variant of row_reduce.wgsl (same structs and
// functions, same contract) that reduce.ts splices in where the device has `subgroups`,
// prepending `enable subgroups;` (which must precede every declaration of the kernel).
//
// The subgroup size S is read from the subgroup_size builtin, never assumed: WebGPU only
// promises a power of two in [4, 128], and it differs between GPUs (32 on NVIDIA, 32 or 64 on
// AMD, 8–32 on Intel, 4 on SwiftShader) and can differ between pipelines on one GPU. The
// kernels' row of `lanes` invocations (a power of two) meets a subgroup in one of two ways:
//   lanes ≤ S: the row is an aligned block inside one subgroup (also when the workgroup is
//     smaller than S and its only subgroup is partial), so an xor butterfly of
//     subgroupShuffleXor over the row's lanes leaves the total in every lane, with no
//     workgroup memory and no barrier;
//   lanes > S: the row is lanes / S whole subgroups; each subgroup reduces natively
//     (subgroupAdd / subgroupMax), its first invocation stores the partial in one slot per
//     subgroup, and after one barrier every lane combines its row's slots in order.
// Both rely on the layout backends give a 1D workgroup: invocation lid is in subgroup lid / S
// at lane lid % S (Chrome's notes for WGSL's subgroup_id call lid = subgroup_id·S + lane
// safe). WGSL does not promise it, so tests/kernels/row_reduce.test.ts checks it on the
// adapter the tests run on.

struct RowLane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) sg_lane: u32,
}

// All members uniform, so the branch on sg_size below may guard a barrier.
struct RowGroup {
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(subgroup_size) sg_size: u32,
}

// One slot per subgroup; sized for a subgroup of one invocation, so no size can overflow it.
var<workgroup> row_red: array<vec2<f32>, 256>;

fn row_combine(a: vec2<f32>, b: vec2<f32>, is_max: bool) -> vec2<f32> {
  return select(a + b, max(a, b), is_max);
}

// Sum (is_max false) or maximum (is_max true) of v over the `lanes` invocations of the
// caller's row, returned to all of them, bit for bit the same in each (an xor butterfly
// pairs a with b and b with a, and IEEE addition commutes). Call it in uniform control flow
// with a uniform `lanes`, as the tree variant: rows past the end take part with neutral values.
fn lanes_reduce(at: RowLane, wg: RowGroup, v: vec2<f32>, lanes: u32, is_max: bool) -> vec2<f32> {
  if (lanes == 1u) {
    return v;
  }
  let s = wg.sg_size;
  if (lanes <= s) {
    var x = v;
    for (var m = 1u; m < lanes; m = m << 1u) {
      x = row_combine(x, subgroupShuffleXor(x, m), is_max);
    }
    return x;
  }
  var part: vec2<f32>;
  if (is_max) {
    part = subgroupMax(v);
  } else {
    part = subgroupAdd(v);
  }
  if (at.sg_lane == 0u) {
    row_red[at.lid / s] = part;
  }
  workgroupBarrier();
  let n = lanes / s;
  let first = at.lid / lanes * n;
  var total = row_red[first];
  for (var k = 1u; k < n; k++) {
    total = row_combine(total, row_red[first + k], is_max);
  }
  // The next call overwrites row_red: every lane must have read its total first.
  workgroupBarrier();
  return total;
}

fn row_sum(at: RowLane, wg: RowGroup, v: f32, lanes: u32) -> f32 {
  return lanes_reduce(at, wg, vec2<f32>(v, 0.0), lanes, false).x;
}

fn row_sum2(at: RowLane, wg: RowGroup, v: vec2<f32>, lanes: u32) -> vec2<f32> {
  return lanes_reduce(at, wg, v, lanes, false);
}

fn row_max(at: RowLane, wg: RowGroup, v: f32, lanes: u32) -> f32 {
  return lanes_reduce(at, wg, vec2<f32>(v, 0.0), lanes, true).x;
}
