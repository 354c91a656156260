// Elementwise kernels over flat f32 arrays of n elements. A 2D grid of 256-wide
// workgroups covers n beyond 65535 workgroups: i = x + y * (groups.x * 256).
//
// Bindings: 0 a (read), 1 b (read), 2 out (read_write), 3 params.
// Each entry point uses a subset; the TS side leaves holes for the others.

struct Params {
  n: u32,      // elements
  c: u32,      // row width for bias broadcasting (bias has c elements)
  alpha: f32,  // scale for axpy
  _pad: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const GELU_K: f32 = 0.7978845608028654; // sqrt(2/pi)
const GELU_C: f32 = 0.044715;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * 256u;
}

// out = a + b
@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = a[i] + b[i];
}

// out = a + b[i % c]   (bias broadcast over rows of width c)
@compute @workgroup_size(256)
fn add_bias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = a[i] + b[i % p.c];
}

// out += b[i % c]   (in place: a buffer cannot be bound read-only and writable at once)
@compute @workgroup_size(256)
fn add_bias_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + b[i % p.c];
}

// out += alpha * a
@compute @workgroup_size(256)
fn axpy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + p.alpha * a[i];
}

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(k (x + c x^3))). out = gelu(a)
@compute @workgroup_size(256)
fn gelu_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let x = a[i];
  let u = GELU_K * (x + GELU_C * x * x * x);
  out[i] = 0.5 * x * (1.0 + tanh_safe(u));
}

// out += dy * gelu'(x), with a = x, b = dy.
@compute @workgroup_size(256)
fn gelu_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let x = a[i];
  let u = GELU_K * (x + GELU_C * x * x * x);
  let t = tanh_safe(u);
  let du = GELU_K * (1.0 + 3.0 * GELU_C * x * x);
  let d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
  out[i] = out[i] + b[i] * d;
}

// tanh that stays finite for large |u| on every backend (some return NaN from exp overflow).
fn tanh_safe(u: f32) -> f32 {
  let c = clamp(u, -15.0, 15.0);
  let e = exp(2.0 * c);
  return (e - 1.0) / (e + 1.0);
}
