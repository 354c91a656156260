// Shared-memory tiled f32 matmul for discrete and integrated GPUs:
//   C (M,N) = alpha · op(A) · op(B) + beta · C (+ bias, broadcast over rows)
// op(A) is (M,K): A stored (M,K), or (K,M) when TRANS_A; op(B) is (K,N): B stored (K,N), or
// (N,K) when TRANS_B; all row-major, any M, N, K (bounds-checked loads and stores).
//
// The classic GPU shape (Volkov & Demmel 2008; the CUDA C programming guide's shared-memory
// matmul, register-blocked as in CUTLASS's thread tile): a 16×16 workgroup computes a 64×64
// block of C; per step of BK = 16 along K it stages a 64×16 tile of op(A) and a 16×64 tile of
// op(B) in workgroup memory (8 KiB, under the 16 KiB default), then each invocation
// accumulates a 4×4 sub-block from them. On CPU adapters matmul.wgsl is used instead: there
// workgroup memory and barriers cost more than the reuse they buy.
//
// The optional bias (N values; cuBLASLt's BIAS epilogue) is added as each element of C is
// written, saving a separate pass over C. Without one the TS side binds any read-only buffer
// there and has_bias = 0 keeps it unread.
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
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> As: array<f32, 1024>; // [BK][BM]: column kk of the A tile is contiguous
var<workgroup> Bs: array<f32, 1024>; // [BK][BN]

fn load_a(i: u32, kk: u32) -> f32 {
  if (i >= p.m || kk >= p.k) { return 0.0; }
  if (TRANS_A) { return a[kk * p.lda + i]; }
  return a[i * p.lda + kk];
}

fn load_b(kk: u32, j: u32) -> f32 {
  if (kk >= p.k || j >= p.n) { return 0.0; }
  if (TRANS_B) { return b[j * p.ldb + kk]; }
  return b[kk * p.ldb + j];
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let row0 = wid.y * BM;
  let col0 = wid.x * BN;
  let flat = lid.y * 16u + lid.x;
  var acc: array<vec4<f32>, 4>; // rows ty·4 + r, columns tx·4 … tx·4 + 3
  for (var k0 = 0u; k0 < p.k; k0 += BK) {
    // 1024 elements per tile, 4 per invocation. The fastest-varying index follows the
    // operand's stored rows, so neighbouring invocations read neighbouring addresses.
    for (var e = 0u; e < 4u; e++) {
      let idx = flat + e * 256u;
      if (TRANS_A) {
        let i = idx % BM;
        let kk = idx / BM;
        As[kk * BM + i] = load_a(row0 + i, k0 + kk);
      } else {
        let kk = idx % BK;
        let i = idx / BK;
        As[kk * BM + i] = load_a(row0 + i, k0 + kk);
      }
      if (TRANS_B) {
        let kk = idx % BK;
        let j = idx / BK;
        Bs[kk * BN + j] = load_b(k0 + kk, col0 + j);
      } else {
        let j = idx % BN;
        let kk = idx / BN;
        Bs[kk * BN + j] = load_b(k0 + kk, col0 + j);
      }
    }
    workgroupBarrier();
    for (var kk = 0u; kk < BK; kk++) {
      let bv = vec4<f32>(Bs[kk * BN + lid.x * 4u], Bs[kk * BN + lid.x * 4u + 1u], Bs[kk * BN + lid.x * 4u + 2u], Bs[kk * BN + lid.x * 4u + 3u]);
      acc[0] = fma(vec4<f32>(As[kk * BM + lid.y * 4u]), bv, acc[0]);
      acc[1] = fma(vec4<f32>(As[kk * BM + lid.y * 4u + 1u]), bv, acc[1]);
      acc[2] = fma(vec4<f32>(As[kk * BM + lid.y * 4u + 2u]), bv, acc[2]);
      acc[3] = fma(vec4<f32>(As[kk * BM + lid.y * 4u + 3u]), bv, acc[3]);
    }
    // The next tile overwrites As/Bs: every invocation must be done reading this one.
    workgroupBarrier();
  }
  for (var r = 0u; r < 4u; r++) {
    let i = row0 + lid.y * 4u + r;
    if (i >= p.m) { continue; }
    for (var q = 0u; q < 4u; q++) {
      let j = col0 + lid.x * 4u + q;
      if (j >= p.n) { continue; }
      var v = p.alpha * acc[r][q];
      // beta = 0 must not read C: it may hold garbage (NaN · 0 is NaN).
      if (p.beta != 0.0) { v += p.beta * c[i * p.n + j]; }
      if (p.has_bias != 0u) { v += bias[j]; }
      c[i * p.n + j] = v;
    }
  }
}
