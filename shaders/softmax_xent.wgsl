// Fused softmax + cross-entropy over rows of V logits, with an ignore mask (target < 0),
// as in llm.c's fused_classifier (train_gpt2.cu) and PyTorch's ignore_index:
//   lse = log Σ_v exp(z_v)  (max-shifted)
//   loss = Σ_{rows with target ≥ 0} (lse − z_target) / count,  count = #rows with target ≥ 0
//   dz  += (softmax(z) − onehot(target)) · gradScale / count   on rows with target ≥ 0
// Only the first `cols` of the V columns are classes: columns ≥ cols are a padded vocabulary
// (--pad-vocab), excluded from the softmax (as if −∞) and given no gradient, as the
// vocab-parallel cross-entropy treats the tp padding (src/parallel/tensor/vocab_parallel.ts).
//
// fwd_lse: LANES invocations per row (specialised from V and the adapter; 1 on CPU adapters,
// where workgroup barriers are expensive), WG / LANES rows per workgroup, 2D grid of row
// blocks: block = wid.x + wid.y · groups.x.
// fwd_loss: one workgroup of WG invocations owns the two loss outputs and sums over all rows
// (no atomics); it is dispatched unspecialised, so WG is 256 there.
// Row sums and maxima come from row_reduce.wgsl (or its subgroup variant, row_reduce_sg.wgsl).
// bwd: one invocation per logit.
//
// Bindings: 0 logits (N,V)  1 targets (N) i32  2 lse (N)  3 loss (2): [mean, count]
//           4 dlogits (N,V) +=  5 params

struct Params {
  n: u32,          // rows
  v: u32,          // classes per row
  scale: f32,      // gradScale (bwd)
  nan_bits: u32,   // 0x7fc00000: a runtime NaN (a constant NaN is a WGSL compile error)
  cols: u32,       // real classes ≤ v; columns ≥ cols are padding
  pad0: u32,       // uniform structs are sized in 16-byte steps
  pad1: u32,
  pad2: u32,
}

const LANES: u32 = 32u;  // invocations per row in fwd_lse: a power of two dividing WG
const WG: u32 = 256u;
const ROWS: u32 = WG / LANES;
const NEG_BIG: f32 = -3.0e38;  // below any finite logit; −inf is not portable in WGSL

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<i32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

//!include row_reduce

// Two passes (max, then Σ exp(z − max)) rather than an online max/sum: one exp per logit
// instead of two, and the second read of a row is cache-hot.
@compute @workgroup_size(WG)
fn fwd_lse(at: RowLane, wg: RowGroup) {
  let row = (wg.wid.x + wg.wid.y * wg.groups.x) * ROWS + at.lid / LANES;
  let lane = at.lid % LANES;
  let live = row < p.n;
  let cols = p.cols;
  let base = row * p.v;
  var mx = NEG_BIG;
  if (live) {
    for (var i = lane; i < cols; i += LANES) {
      mx = max(mx, logits[base + i]);
    }
  }
  mx = row_max(at, wg, mx, LANES);
  var s = 0.0;
  if (live) {
    for (var i = lane; i < cols; i += LANES) {
      s += exp(logits[base + i] - mx);
    }
  }
  s = row_sum(at, wg, s, LANES);
  if (live && lane == 0u) {
    // s ≥ 1: the maximum contributes exp(0).
    lse[row] = mx + log(s);
  }
}

// loss = [Σ (lse − z_target) / count, count]; 0 loss when every row is ignored.
// A target ≥ cols (a caller bug the GPU cannot throw for) makes the loss NaN rather than
// reading another row's logit.
@compute @workgroup_size(WG)
fn fwd_loss(at: RowLane, wg: RowGroup) {
  let lid = at.lid;
  var acc = vec2<f32>(0.0, 0.0);
  for (var r = lid; r < p.n; r += WG) {
    let t = targets[r];
    if (t >= 0) {
      var l = bitcast<f32>(p.nan_bits);
      if (u32(t) < p.cols) {
        l = lse[r] - logits[r * p.v + u32(t)];
      }
      acc += vec2<f32>(l, 1.0);
    }
  }
  // The whole workgroup is one "row" of WG lanes.
  let total = row_sum2(at, wg, acc, WG);
  if (lid == 0u) {
    loss[0] = select(0.0, total.x / total.y, total.y > 0.0);
    loss[1] = total.y;
  }
}

// Grid: x over the columns of a row (64 per workgroup), y·z over rows (z only past 65535
// rows), so no invocation divides by V — integer division has no SIMD form on CPU adapters.
@compute @workgroup_size(64)
fn bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let col = gid.x;
  let row = gid.y + gid.z * groups.y;
  let v = p.v;
  // Padded columns (≥ cols) take no part in the softmax: their gradient is zero.
  if (col >= p.cols || row >= p.n) { return; }
  let t = targets[row];
  let count = loss[1];
  // count > 0 whenever some target is ≥ 0; the test only guards against a stale loss tensor.
  if (t < 0 || count <= 0.0) { return; }
  let i = row * v + col;
  var g = exp(logits[i] - lse[row]);
  if (col == u32(t)) {
    g -= 1.0;
  }
  dlogits[i] += g * (p.scale / count);
}
