// The large-tile variant of matmul_tiled.wgsl, for outputs big enough to fill a GPU with
// 128×128 blocks: same bindings, parameters and result,
//   C (M,N) = alpha · op(A) · op(B) + beta · C (+ bias, broadcast over rows).
//
// matmul_tiled.wgsl's 4×4 thread tile does 16 FMAs per 8 scalar workgroup-memory loads, so on
// a real GPU it waits on workgroup memory (docs/gpu-results.md). Here a 16×16 workgroup computes
// a 128×128 block and each invocation an 8×8 sub-block: rows ty·4 + {0‥3} and 64 + ty·4 + {0‥3},
// columns likewise with tx, the split halves keeping the vec4 loads of a warp on consecutive
// addresses (the thread tile of CUTLASS's SGEMM and of Volkov & Demmel 2008). Per step of
// BK = 16 along K: 4 vec4 workgroup loads feed 64 FMAs. Tiles stage as [BK][128] vec4 rows,
// padded to 33 vec4s so the 16 k-rows a warp writes fall on different banks; each invocation
// stages whole vec4s (4 rows of op(A), 4 columns of op(B)), so no two write parts of one.
// The 64 accumulators are named registers, not an array: an array indexed in loops can end up
// in local memory, which a naga-compiled (Deno wgpu) run showed as a 10× slower kernel.
//
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 bias (read), 4 params.

//!include matmul_tiled_common

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 16u;

const ROW: u32 = 33u; // vec4s per staged k-row: BM / 4 = 32, plus one of padding
var<workgroup> As: array<vec4<f32>, 528>; // [BK][ROW]: rows 4·v … 4·v + 3 of op(A) at column kk
var<workgroup> Bs: array<vec4<f32>, 528>; // [BK][ROW]: columns 4·v … 4·v + 3 of op(B) at row kk

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let row0 = wid.y * BM;
  let col0 = wid.x * BN;
  let flat = lid.y * 16u + lid.x;
  // x{h}{w}{r}: row row0 + h·64 + ty·4 + r, columns col0 + w·64 + tx·4 … + 3.
  var x000 = vec4<f32>(); var x001 = vec4<f32>(); var x002 = vec4<f32>(); var x003 = vec4<f32>();
  var x010 = vec4<f32>(); var x011 = vec4<f32>(); var x012 = vec4<f32>(); var x013 = vec4<f32>();
  var x100 = vec4<f32>(); var x101 = vec4<f32>(); var x102 = vec4<f32>(); var x103 = vec4<f32>();
  var x110 = vec4<f32>(); var x111 = vec4<f32>(); var x112 = vec4<f32>(); var x113 = vec4<f32>();
  for (var k0 = 0u; k0 < p.k; k0 += BK) {
    // 512 vec4s per tile, 2 per invocation. The fastest-varying index follows the operand's
    // stored rows, so neighbouring invocations read neighbouring addresses.
    for (var e = 0u; e < 2u; e++) {
      let s = flat + e * 256u;
      var v: u32;
      var kk: u32;
      if (TRANS_A) { v = s % 32u; kk = s / 32u; } else { kk = s % BK; v = s / BK; }
      As[kk * ROW + v] = a_vec(row0 + 4u * v, k0 + kk);
      if (TRANS_B) { kk = s % BK; v = s / BK; } else { v = s % 32u; kk = s / 32u; }
      Bs[kk * ROW + v] = b_vec(k0 + kk, col0 + 4u * v);
    }
    workgroupBarrier();
    for (var kk = 0u; kk < BK; kk++) {
      let a0 = As[kk * ROW + lid.y];
      let a1 = As[kk * ROW + lid.y + 16u];
      let b0 = Bs[kk * ROW + lid.x];
      let b1 = Bs[kk * ROW + lid.x + 16u];
      x000 = fma(vec4<f32>(a0.x), b0, x000); x001 = fma(vec4<f32>(a0.y), b0, x001);
      x002 = fma(vec4<f32>(a0.z), b0, x002); x003 = fma(vec4<f32>(a0.w), b0, x003);
      x010 = fma(vec4<f32>(a0.x), b1, x010); x011 = fma(vec4<f32>(a0.y), b1, x011);
      x012 = fma(vec4<f32>(a0.z), b1, x012); x013 = fma(vec4<f32>(a0.w), b1, x013);
      x100 = fma(vec4<f32>(a1.x), b0, x100); x101 = fma(vec4<f32>(a1.y), b0, x101);
      x102 = fma(vec4<f32>(a1.z), b0, x102); x103 = fma(vec4<f32>(a1.w), b0, x103);
      x110 = fma(vec4<f32>(a1.x), b1, x110); x111 = fma(vec4<f32>(a1.y), b1, x111);
      x112 = fma(vec4<f32>(a1.z), b1, x112); x113 = fma(vec4<f32>(a1.w), b1, x113);
    }
    // The next tile overwrites As/Bs: every invocation must be done reading this one.
    workgroupBarrier();
  }
  let i0 = row0 + lid.y * 4u;
  let i1 = i0 + 64u;
  let j0 = col0 + lid.x * 4u;
  let j1 = j0 + 64u;
  store4(i0, j0, x000); store4(i0 + 1u, j0, x001); store4(i0 + 2u, j0, x002); store4(i0 + 3u, j0, x003);
  store4(i0, j1, x010); store4(i0 + 1u, j1, x011); store4(i0 + 2u, j1, x012); store4(i0 + 3u, j1, x013);
  store4(i1, j0, x100); store4(i1 + 1u, j0, x101); store4(i1 + 2u, j0, x102); store4(i1 + 3u, j0, x103);
  store4(i1, j1, x110); store4(i1 + 1u, j1, x111); store4(i1 + 2u, j1, x112); store4(i1 + 3u, j1, x113);
}
