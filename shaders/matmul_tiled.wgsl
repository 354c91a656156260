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

//!include matmul_tiled_common

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> As: array<f32, 1024>; // [BK][BM]: column kk of the A tile is contiguous
var<workgroup> Bs: array<f32, 1024>; // [BK][BN]

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let row0 = wid.y * BM;
  let col0 = wid.x * BN;
  let flat = lid.y * 16u + lid.x;
  // accR: row ty·4 + R, columns tx·4 … tx·4 + 3; named, not an array
  // (docs/design.md#webgpu-limits-that-shape-the-kernels).
  var acc0 = vec4<f32>();
  var acc1 = vec4<f32>();
  var acc2 = vec4<f32>();
  var acc3 = vec4<f32>();
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
      acc0 = fma(vec4<f32>(As[kk * BM + lid.y * 4u]), bv, acc0);
      acc1 = fma(vec4<f32>(As[kk * BM + lid.y * 4u + 1u]), bv, acc1);
      acc2 = fma(vec4<f32>(As[kk * BM + lid.y * 4u + 2u]), bv, acc2);
      acc3 = fma(vec4<f32>(As[kk * BM + lid.y * 4u + 3u]), bv, acc3);
    }
    // The next tile overwrites As/Bs: every invocation must be done reading this one.
    workgroupBarrier();
  }
  let i0 = row0 + lid.y * 4u;
  let j0 = col0 + lid.x * 4u;
  store4(i0, j0, acc0);
  store4(i0 + 1u, j0, acc1);
  store4(i0 + 2u, j0, acc2);
  store4(i0 + 3u, j0, acc3);
}
