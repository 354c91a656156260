// Elementwise primitives of the RWKV / Mamba / hybrid blocks, forward and backward:
//   silu(x) = x·σ(x) (Mamba's gate), σ(x), relu(x)² (RWKV channel mix), s·logσ(x) (decay
//   gates g = logσ(x)/τ, docs/design.md#other-kernels), softplus (Mamba's Δ), a∘b, token shift (RWKV time
//   shift), lerp with a per-channel mix μ (RWKV time mix) and per-channel scaling.
// Backward entry points ACCUMULATE (out += …): the tape sums fan-out gradients that way.
//
// Flat entry points take one invocation per element over a 2D grid of 256-wide workgroups,
// i = x + y · (groups.x · 256), so n beyond 65 535 workgroups is covered. Per-channel vectors
// (C) broadcast over rows through col = i % C.
// The colsum_* entry points reduce over rows without atomics: one invocation owns each
// (chunk of rows, column) output; the TS side sums the chunk partials when there are several.
//
// Bindings: 0 a (read), 1 b (read), 2 c (read), 3 out (read_write), 4 params.
// Each entry point uses a subset; the TS side leaves holes for the others.

struct Params {
  n: u32,           // elements (flat entries); rows (colsum_*)
  c: u32,           // channels: the row width per-channel vectors broadcast over
  alpha: f32,       // logsigmoid's scale s
  t: u32,           // sequence length (token shift)
  chunk: u32,       // rows per chunk (colsum_*)
  accumulate: u32,  // colsum_*: 1 out += Σ, 0 out = Σ
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> c: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * 256u;
}

// σ(x) without overflow: exp of a non-positive argument only (exp(−x) overflows for x < −88
// and some backends return NaN rather than inf from it).
fn sigm(x: f32) -> f32 {
  let e = exp(-abs(x));
  let s = 1.0 / (1.0 + e);
  return select(e * s, s, x >= 0.0);
}

// log(1 + e) for e = exp(−|x|) ∈ (0, 1]. WGSL has no log1p; log(1 + e) rounds 1 + e and
// loses e's low bits for small e, where the series e − e²/2 + e³/3 is exact to f32.
fn log1p_small(e: f32) -> f32 {
  return select(log(1.0 + e), e * (1.0 - e * (0.5 - e / 3.0)), e < 1e-2);
}

// softplus(x) = log(1 + eˣ) = max(x, 0) + log(1 + e^{−|x|})
fn softplus(x: f32) -> f32 {
  return max(x, 0.0) + log1p_small(exp(-abs(x)));
}

// out = silu(a) = a·σ(a)
@compute @workgroup_size(256)
fn silu_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = a[i] * sigm(a[i]);
}

// out += dy·silu′(x), a = x, b = dy: silu′ = σ(x)·(1 + x·(1 − σ(x)))
@compute @workgroup_size(256)
fn silu_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let x = a[i];
  let s = sigm(x);
  out[i] = out[i] + b[i] * s * (1.0 + x * (1.0 - s));
}

// out = σ(a)
@compute @workgroup_size(256)
fn sigmoid_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = sigm(a[i]);
}

// out += dy·σ(x)(1 − σ(x)), a = x, b = dy
@compute @workgroup_size(256)
fn sigmoid_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let s = sigm(a[i]);
  out[i] = out[i] + b[i] * s * (1.0 - s);
}

// out = relu(a)²
@compute @workgroup_size(256)
fn relu2_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let r = max(a[i], 0.0);
  out[i] = r * r;
}

// out += dy·2·relu(x), a = x, b = dy
@compute @workgroup_size(256)
fn relu2_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + b[i] * 2.0 * max(a[i], 0.0);
}

// out = s·logσ(a) = s·(min(a, 0) − log(1 + e^{−|a|})), s = p.alpha
@compute @workgroup_size(256)
fn logsigmoid_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let x = a[i];
  out[i] = p.alpha * (min(x, 0.0) - log1p_small(exp(-abs(x))));
}

// out += dy·s·σ(−x), a = x, b = dy
@compute @workgroup_size(256)
fn logsigmoid_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + b[i] * p.alpha * sigm(-a[i]);
}

// out = softplus(a)
@compute @workgroup_size(256)
fn softplus_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = softplus(a[i]);
}

// out += dy·σ(x), a = x, b = dy
@compute @workgroup_size(256)
fn softplus_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + b[i] * sigm(a[i]);
}

// out = a∘b
@compute @workgroup_size(256)
fn mul_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = a[i] * b[i];
}

// out += a∘b (mul's backward: da += dy∘b, db += dy∘a, one dispatch each so a = b aliases)
@compute @workgroup_size(256)
fn mul_acc(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + a[i] * b[i];
}

// out = a ∘ b[col], b (C) broadcast over rows
@compute @workgroup_size(256)
fn scale_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = a[i] * b[i % p.c];
}

// out += a ∘ b[col] (scale's dx with a = dy; lerp's db with b = μ)
@compute @workgroup_size(256)
fn scale_acc(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + a[i] * b[i % p.c];
}

// out = a + μ∘(b − a), μ = c (C) broadcast over rows
@compute @workgroup_size(256)
fn lerp_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = a[i] + c[i % p.c] * (b[i] - a[i]);
}

// out += a ∘ (1 − b[col]): lerp's da with a = dy, b = μ
@compute @workgroup_size(256)
fn lerp_bwd_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  out[i] = out[i] + a[i] * (1.0 - b[i % p.c]);
}

// out[b, t] = a[b, t − 1], 0 at t = 0 of every sequence; a, out (B, T, C) flat
@compute @workgroup_size(256)
fn shift_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let t = (i / p.c) % p.t;
  out[i] = select(a[max(i, p.c) - p.c], 0.0, t == 0u);
}

// out[b, t] += a[b, t + 1], nothing at t = T − 1: the transpose of shift_fwd, a = dy
@compute @workgroup_size(256)
fn shift_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  let t = (i / p.c) % p.t;
  if (t + 1u < p.t) {
    out[i] = out[i] + a[i + p.c];
  }
}

// out[k·C + col] (+)= Σ_{rows r of chunk k} a[r, col]·b[r, col]   (scale's ds with a = dy, b = x)
@compute @workgroup_size(256)
fn colsum_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  let w = p.c;
  let chunks = (p.n + p.chunk - 1u) / p.chunk;
  if (i >= chunks * w) { return; }
  let k = i / w;
  let col = i % w;
  let r1 = min(p.n, (k + 1u) * p.chunk);
  var s = 0.0;
  for (var r = k * p.chunk; r < r1; r++) {
    s += a[r * w + col] * b[r * w + col];
  }
  if (p.accumulate != 0u) {
    s += out[i];
  }
  out[i] = s;
}

// out[k·C + col] (+)= Σ_{rows r of chunk k} a[r, col]·(b[r, col] − c[r, col])
// (lerp's dμ with a = dy, b = lerp's b, c = lerp's a)
@compute @workgroup_size(256)
fn colsum_mul_diff(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  let w = p.c;
  let chunks = (p.n + p.chunk - 1u) / p.chunk;
  if (i >= chunks * w) { return; }
  let k = i / w;
  let col = i % w;
  let r1 = min(p.n, (k + 1u) * p.chunk);
  var s = 0.0;
  for (var r = k * p.chunk; r < r1; r++) {
    s += a[r * w + col] * (b[r * w + col] - c[r * w + col]);
  }
  if (p.accumulate != 0u) {
    s += out[i];
  }
  out[i] = s;
}
