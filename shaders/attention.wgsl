// Naive (materialised T×T) multi-head causal self-attention, forward and backward, as
// llm.c's attention_forward/backward and nanoGPT's non-flash path.
//
// Every product of the forward and backward passes (S = QKᵀ, Y = PV, dP = dY Vᵀ,
// dQ = dS K, dK = dSᵀ Q, dV = Pᵀ dY) is one batched, strided GEMM: entry point `mm`,
// batched over (b, h) on grid z, with each operand addressed through its own strides so
// Q, K, V, dQ, dK, dV are read and written in place inside the (B, T, 3C) layout and no
// transposes are materialised. The two softmax entry points work on rows of att.
//
// No entry point uses workgroup memory or barriers. Measured on the CPU WebGPU drivers the
// tests and the default preset run on: SwiftShader (Dawn) pays a millisecond or more per
// workgroup that synchronises, so a shared-memory tiled GEMM and a workgroup-per-row softmax
// ran 8× and 100× slower there than these; on lavapipe (wgpu) these are as fast or faster
// (CPU caches do what workgroup tiles do on a GPU). FlashAttention replaces this on GPUs.
//
// Bindings (holes where an entry point does not use one):
//   0 ma (read)        mm: A            softmax_bwd: P (= att)
//   1 mb (read)        mm: B
//   2 mo (read_write)  mm: O            softmax_fwd: att (scores in, P out)   softmax_bwd: dP in, dS out
//   3 p  (uniform)

struct Params {
  m: u32, n: u32, k: u32, nh: u32,           // O is m×n per batch, inner dim k; batch z = b·nh + h
  a_off: u32, a_sb: u32, a_sh: u32, a_si: u32, // A(i, k) at a_off + b·a_sb + h·a_sh + i·a_si + k·a_sk
  a_sk: u32, b_off: u32, b_sb: u32, b_sh: u32, // B(k, j) at b_off + b·b_sb + h·b_sh + k·b_sk + j·b_sj
  b_sk: u32, b_sj: u32, o_off: u32, o_sb: u32, // O(i, j) at o_off + b·o_sb + h·o_sh + i·o_si + j·o_sj
  o_sh: u32, o_si: u32, o_sj: u32, alpha: f32, // O = alpha·A·B (+ O when accumulate)
  accumulate: u32, causal: u32, rows: u32, t: u32, // causal: see CAUSAL_*; rows, t: softmax only
}

// Causal modes of `mm`. Masked probabilities (and their gradients) are exact zeros, so
// these only skip work at the granularity of one invocation's 8×8 block; they never change
// a result.
const CAUSAL_NONE: u32 = 0u;
const CAUSAL_BLOCKS: u32 = 1u;  // O is T×T (rows t, cols s): skip blocks entirely above the diagonal
const CAUSAL_K_LE_I: u32 = 2u; // inner index k = s ≤ row i = t (Y = PV, dQ = dS K)
const CAUSAL_K_GE_I: u32 = 3u; // inner index k = t ≥ row i = s (dK = dSᵀQ, dV = PᵀdY)

@group(0) @binding(0) var<storage, read> ma: array<f32>;
@group(0) @binding(1) var<storage, read> mb: array<f32>;
@group(0) @binding(2) var<storage, read_write> mo: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// ---- batched strided GEMM --------------------------------------------------------------
// Each invocation computes an 8×8 block of O (rows i0…i0+7, cols j0…j0+7) straight from
// global memory: per inner step 8 loads of A and 8 of B feed 64 FMAs. The workgroup is
// DX×DY invocations (64), DX narrowed by the TS side when O has few columns (T×hs outputs
// with small heads), so SIMD lanes are not spent on columns that do not exist.
// 4×4 and 2×4 blocks were 30–60% slower on lavapipe.
const DX: u32 = 8u;
const DY: u32 = 8u;

@compute @workgroup_size(DX * DY)
fn mm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let i0 = (wid.y * DY + lid / DX) * 8u;
  let j0 = (wid.x * DX + lid % DX) * 8u;
  if (i0 >= p.m || j0 >= p.n) { return; }
  if (p.causal == CAUSAL_BLOCKS && j0 > i0 + 7u) { return; }
  var k_lo = 0u;
  var k_hi = p.k;
  if (p.causal == CAUSAL_K_LE_I) { k_hi = min(p.k, i0 + 8u); }
  if (p.causal == CAUSAL_K_GE_I) { k_lo = i0; }

  let bi = wid.z / p.nh;
  let hi = wid.z % p.nh;
  let a_base = p.a_off + bi * p.a_sb + hi * p.a_sh;
  let b_base = p.b_off + bi * p.b_sb + hi * p.b_sh;
  // Rows and columns past the edge read a clamped, valid element (no branch in the inner
  // loop) and are never stored.
  let last_i = p.m - 1u;
  let last_j = p.n - 1u;
  let ar0 = a_base + min(i0 + 0u, last_i) * p.a_si;
  let ar1 = a_base + min(i0 + 1u, last_i) * p.a_si;
  let ar2 = a_base + min(i0 + 2u, last_i) * p.a_si;
  let ar3 = a_base + min(i0 + 3u, last_i) * p.a_si;
  let ar4 = a_base + min(i0 + 4u, last_i) * p.a_si;
  let ar5 = a_base + min(i0 + 5u, last_i) * p.a_si;
  let ar6 = a_base + min(i0 + 6u, last_i) * p.a_si;
  let ar7 = a_base + min(i0 + 7u, last_i) * p.a_si;
  let bc0 = b_base + min(j0 + 0u, last_j) * p.b_sj;
  let bc1 = b_base + min(j0 + 1u, last_j) * p.b_sj;
  let bc2 = b_base + min(j0 + 2u, last_j) * p.b_sj;
  let bc3 = b_base + min(j0 + 3u, last_j) * p.b_sj;
  let bc4 = b_base + min(j0 + 4u, last_j) * p.b_sj;
  let bc5 = b_base + min(j0 + 5u, last_j) * p.b_sj;
  let bc6 = b_base + min(j0 + 6u, last_j) * p.b_sj;
  let bc7 = b_base + min(j0 + 7u, last_j) * p.b_sj;
  // c<r><h>: row i0 + r, columns j0 + 4h … j0 + 4h + 3.
  var c00 = vec4<f32>(0.0);
  var c01 = vec4<f32>(0.0);
  var c10 = vec4<f32>(0.0);
  var c11 = vec4<f32>(0.0);
  var c20 = vec4<f32>(0.0);
  var c21 = vec4<f32>(0.0);
  var c30 = vec4<f32>(0.0);
  var c31 = vec4<f32>(0.0);
  var c40 = vec4<f32>(0.0);
  var c41 = vec4<f32>(0.0);
  var c50 = vec4<f32>(0.0);
  var c51 = vec4<f32>(0.0);
  var c60 = vec4<f32>(0.0);
  var c61 = vec4<f32>(0.0);
  var c70 = vec4<f32>(0.0);
  var c71 = vec4<f32>(0.0);

  for (var k = k_lo; k < k_hi; k++) {
    let ka = k * p.a_sk;
    let kb = k * p.b_sk;
    let b0 = vec4<f32>(mb[bc0 + kb], mb[bc1 + kb], mb[bc2 + kb], mb[bc3 + kb]);
    let b1 = vec4<f32>(mb[bc4 + kb], mb[bc5 + kb], mb[bc6 + kb], mb[bc7 + kb]);
    let a0 = vec4<f32>(ma[ar0 + ka]);
    c00 = fma(a0, b0, c00);
    c01 = fma(a0, b1, c01);
    let a1 = vec4<f32>(ma[ar1 + ka]);
    c10 = fma(a1, b0, c10);
    c11 = fma(a1, b1, c11);
    let a2 = vec4<f32>(ma[ar2 + ka]);
    c20 = fma(a2, b0, c20);
    c21 = fma(a2, b1, c21);
    let a3 = vec4<f32>(ma[ar3 + ka]);
    c30 = fma(a3, b0, c30);
    c31 = fma(a3, b1, c31);
    let a4 = vec4<f32>(ma[ar4 + ka]);
    c40 = fma(a4, b0, c40);
    c41 = fma(a4, b1, c41);
    let a5 = vec4<f32>(ma[ar5 + ka]);
    c50 = fma(a5, b0, c50);
    c51 = fma(a5, b1, c51);
    let a6 = vec4<f32>(ma[ar6 + ka]);
    c60 = fma(a6, b0, c60);
    c61 = fma(a6, b1, c61);
    let a7 = vec4<f32>(ma[ar7 + ka]);
    c70 = fma(a7, b0, c70);
    c71 = fma(a7, b1, c71);
  }

  let o_base = p.o_off + bi * p.o_sb + hi * p.o_sh;
  store4(o_base, i0 + 0u, j0, c00);
  store4(o_base, i0 + 0u, j0 + 4u, c01);
  store4(o_base, i0 + 1u, j0, c10);
  store4(o_base, i0 + 1u, j0 + 4u, c11);
  store4(o_base, i0 + 2u, j0, c20);
  store4(o_base, i0 + 2u, j0 + 4u, c21);
  store4(o_base, i0 + 3u, j0, c30);
  store4(o_base, i0 + 3u, j0 + 4u, c31);
  store4(o_base, i0 + 4u, j0, c40);
  store4(o_base, i0 + 4u, j0 + 4u, c41);
  store4(o_base, i0 + 5u, j0, c50);
  store4(o_base, i0 + 5u, j0 + 4u, c51);
  store4(o_base, i0 + 6u, j0, c60);
  store4(o_base, i0 + 6u, j0 + 4u, c61);
  store4(o_base, i0 + 7u, j0, c70);
  store4(o_base, i0 + 7u, j0 + 4u, c71);
}

// O(gi, gj…gj+3) = alpha·acc (+ O when accumulating), dropping what lies outside m×n.
fn store4(o_base: u32, gi: u32, gj: u32, acc: vec4<f32>) {
  if (gi >= p.m) { return; }
  for (var c = 0u; c < 4u; c++) {
    if (gj + c >= p.n) { return; }
    let o = o_base + gi * p.o_si + (gj + c) * p.o_sj;
    var v = p.alpha * acc[c];
    if (p.accumulate != 0u) { v += mo[o]; }
    mo[o] = v;
  }
}

// ---- row softmax, forward and backward ---------------------------------------------------
// One invocation per row r = (b·nh + h)·T + t, walking its contiguous row. When causal only
// s ≤ t is live; the rest of the row is written as exact zeros without being read, so
// whatever a pooled scratch buffer held (NaN included) cannot leak into P or dS.
const SM_WG: u32 = 64u;

fn row_index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * SM_WG;
}

fn live_len(row: u32) -> u32 {
  if (p.causal != 0u) { return row % p.t + 1u; }
  return p.t;
}

// att row: scaled scores in, probabilities out (max-subtracted, as every stable softmax).
@compute @workgroup_size(SM_WG)
fn softmax_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let row = row_index(gid, groups);
  if (row >= p.rows) { return; }
  let len = live_len(row);
  let base = row * p.t;
  var mx = mo[base];
  for (var s = 1u; s < len; s++) { mx = max(mx, mo[base + s]); }
  var sum = 0.0;
  for (var s = 0u; s < len; s++) {
    let e = exp(mo[base + s] - mx);
    mo[base + s] = e;
    sum += e;
  }
  let inv = 1.0 / sum;
  for (var s = 0u; s < len; s++) { mo[base + s] *= inv; }
  for (var s = len; s < p.t; s++) { mo[base + s] = 0.0; }
}

// dS = P ∘ (dP − Σ_s P·dP), in place over dP (binding 2), P from att (binding 0).
@compute @workgroup_size(SM_WG)
fn softmax_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let row = row_index(gid, groups);
  if (row >= p.rows) { return; }
  let len = live_len(row);
  let base = row * p.t;
  var pd = 0.0;
  for (var s = 0u; s < len; s++) { pd = fma(ma[base + s], mo[base + s], pd); }
  for (var s = 0u; s < len; s++) { mo[base + s] = ma[base + s] * (mo[base + s] - pd); }
  for (var s = len; s < p.t; s++) { mo[base + s] = 0.0; }
}
