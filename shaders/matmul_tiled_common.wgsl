// What the shared-memory tiled matmuls (matmul_tiled*.wgsl, subgroup variants included) share:
// the parameters, the bindings, the layout constants the TS side specialises, and the
// bounds-checked loads of op(A) and op(B) (one element, or four rows of op(A) / four columns of
// op(B) as a vec4), which return 0 outside the matrices so ragged edges need no branch in the
// inner loop, and the epilogue that stores four columns of C. The loads convert to f32 so the
// TS side can declare a or b as array<f16> (f16 operands, f32 accumulation and output).
//
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 bias (read), 4 params.

struct Params {
  m: u32,
  n: u32,
  k: u32,
  lda: u32,  // A's stored row length: K, or M when TRANS_A
  ldb: u32,  // B's stored row length: N, or K when TRANS_B
  alpha: f32,
  beta: f32,
  has_bias: u32,  // 1: add bias[j] to column j of C
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const TRANS_A: bool = false;
const TRANS_B: bool = false;

fn load_a(i: u32, kk: u32) -> f32 {
  if (i >= p.m || kk >= p.k) { return 0.0; }
  if (TRANS_A) { return f32(a[kk * p.lda + i]); }
  return f32(a[i * p.lda + kk]);
}

fn load_b(kk: u32, j: u32) -> f32 {
  if (kk >= p.k || j >= p.n) { return 0.0; }
  if (TRANS_B) { return f32(b[j * p.ldb + kk]); }
  return f32(b[kk * p.ldb + j]);
}

// Rows i … i + 3 of op(A) at column kk (zero outside).
fn a_vec(i: u32, kk: u32) -> vec4<f32> {
  return vec4<f32>(load_a(i, kk), load_a(i + 1u, kk), load_a(i + 2u, kk), load_a(i + 3u, kk));
}

// Columns j … j + 3 of op(B) at row kk (zero outside).
fn b_vec(kk: u32, j: u32) -> vec4<f32> {
  return vec4<f32>(load_b(kk, j), load_b(kk, j + 1u), load_b(kk, j + 2u), load_b(kk, j + 3u));
}

// Writes C[i, j … j + 3] = alpha·v + beta·C (+ bias), skipping what lies outside C.
fn store4(i: u32, j: u32, v: vec4<f32>) {
  if (i >= p.m) { return; }
  for (var q = 0u; q < 4u; q++) {
    let jq = j + q;
    if (jq >= p.n) { return; }
    var x = p.alpha * v[q];
    // beta = 0 must not read C: it may hold garbage (NaN · 0 is NaN).
    if (p.beta != 0.0) { x += p.beta * c[i * p.n + jq]; }
    if (p.has_bias != 0u) { x += bias[jq]; }
    c[i * p.n + jq] = x;
  }
}
