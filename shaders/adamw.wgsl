// AdamW (Loshchilov & Hutter, arXiv 1711.05101) as torch.optim.AdamW, with the global
// gradient-norm clipping of torch.nn.utils.clip_grad_norm_ folded into the update.
//
// Bindings (holes where an entry point does not use one):
//   0 src   (read)        norm_partial: grads     norm_final: partials   update: grad
//   1 hyper (read)        update, sgd: [lr, beta1, beta2, eps, 1−beta1^t, 1−beta2^t, 0, 0]
//   2 nrm   (read)        update, sgd: [‖g‖, clip scale]
//   3 dst   (read_write)  norm_partial: partials  norm_final: [‖g‖, clip scale]  update, sgd: param
//   4 m1    (read_write)  update: first moment
//   5 m2    (read_write)  update: second moment
//   6 p     (uniform)
// Per-step values come from `hyper` (storage), so the uniform below is the same every step.

struct Params {
  n: u32,             // elements (grads for norm_partial, partials for norm_final, param for update)
  weight_decay: f32,  // update
  max_norm: f32,      // norm_final; ≤ 0 disables clipping
  _pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> hyper: array<f32>;
@group(0) @binding(2) var<storage, read> nrm: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read_write> m1: array<f32>;
@group(0) @binding(5) var<storage, read_write> m2: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const WG: u32 = 256u;
var<workgroup> red: array<f32, WG>;

// Pass 1: one partial sum of squares per invocation, with no workgroup memory and no barrier:
// SwiftShader (Dawn on CPU) pays milliseconds per workgroup that synchronises (≈4 s for 1M
// elements with a per-workgroup tree), lavapipe and GPUs do not mind. Each invocation strides
// over the array by the grid's width, so neighbouring invocations read neighbouring elements.
@compute @workgroup_size(WG)
fn norm_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let stride = groups.x * WG;
  var s = 0.0;
  for (var i = gid.x; i < p.n; i += stride) {
    let g = src[i];
    s = fma(g, g, s);
  }
  dst[gid.x] = s;
}

// Pass 2 (one workgroup): ‖g‖ = sqrt(Σ partials); clip scale as clip_grad_norm_:
// min(1, max_norm / (‖g‖ + 1e-6)).
@compute @workgroup_size(WG)
fn norm_final(@builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = lid; i < p.n; i += WG) { s += src[i]; }
  red[lid] = s;
  workgroupBarrier();
  for (var w = WG / 2u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let norm = sqrt(red[0]);
    var scale = 1.0;
    if (p.max_norm > 0.0) { scale = min(1.0, p.max_norm / (norm + 1e-6)); }
    dst[0] = norm;
    dst[1] = scale;
  }
}

// One AdamW step, torch.optim.AdamW's order of operations: decay first (decoupled, from the
// old p), then the bias-corrected Adam step.
@compute @workgroup_size(WG)
fn update(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * WG;
  if (i >= p.n) { return; }
  let lr = hyper[0];
  let beta1 = hyper[1];
  let beta2 = hyper[2];
  let eps = hyper[3];
  let bc1 = hyper[4];
  let bc2 = hyper[5];
  let g = src[i] * nrm[1];
  let m = beta1 * m1[i] + (1.0 - beta1) * g;
  let v = beta2 * m2[i] + (1.0 - beta2) * g * g;
  m1[i] = m;
  m2[i] = v;
  let w = dst[i];
  dst[i] = w - lr * ((m / bc1) / (sqrt(v / bc2) + eps) + p.weight_decay * w);
}

// Plain SGD with the same clip and decoupled decay (p ← p(1 − lr·wd) − lr·g′): an update linear in
// p and g, so averaging the parameters of workers that each took one step equals one step with the
// averaged gradient (the local-SGD / DiLoCo identity at H = 1, docs/design.md#low-communication-data-parallelism).
@compute @workgroup_size(WG)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * WG;
  if (i >= p.n) { return; }
  let lr = hyper[0];
  let w = dst[i];
  dst[i] = w - lr * (src[i] * nrm[1] + p.weight_decay * w);
}
