// The subgroup variant of matmul_tiled_128.wgsl, which matmul.ts picks where the device has
// `subgroups`: same bindings, parameters, 128×128 block of C per workgroup and 8×8 block per
// invocation (rows ty·4 + {0‥3} and 64 + ty·4 + {0‥3}, columns likewise with tx), same result,
//   C (M,N) = alpha · op(A) · op(B) + beta · C (+ bias, broadcast over rows).
//
// op(B) is staged in workgroup memory as in matmul_tiled_128.wgsl; op(A) goes through
// subgroupShuffle exactly as in matmul_tiled_sg.wgsl (see there for the segments of
// W = min(subgroup_size, 16) invocations of one thread row and the subgroup layout they rely
// on), with two vec4 fragments per invocation, one per half of the block's rows. The subgroup
// size is read from the builtin, not assumed, and does not change the order of the sums.
//
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 bias (read), 4 params.
enable subgroups;

//!include matmul_tiled_common

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 16u;

const ROW: u32 = 33u; // vec4s per staged k-row: BN / 4 = 32, plus one of padding
var<workgroup> Bs: array<vec4<f32>, 528>; // [BK][ROW]: columns 4·v … 4·v + 3 of op(B) at row kk

@compute @workgroup_size(256)
fn main(
  @builtin(local_invocation_index) flat: u32,
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let row0 = wid.y * BM;
  let col0 = wid.x * BN;
  let tx = flat % 16u;
  let ty = flat / 16u;
  // Uniform (from subgroup_size), so the loops it bounds keep the shuffles in uniform control flow.
  let w = min(sg_size, 16u);
  let seg = tx % w;
  let first = lane - seg;
  // x{h}{w}{r}: row row0 + h·64 + ty·4 + r, columns col0 + w·64 + tx·4 … + 3.
  var x000 = vec4<f32>(); var x001 = vec4<f32>(); var x002 = vec4<f32>(); var x003 = vec4<f32>();
  var x010 = vec4<f32>(); var x011 = vec4<f32>(); var x012 = vec4<f32>(); var x013 = vec4<f32>();
  var x100 = vec4<f32>(); var x101 = vec4<f32>(); var x102 = vec4<f32>(); var x103 = vec4<f32>();
  var x110 = vec4<f32>(); var x111 = vec4<f32>(); var x112 = vec4<f32>(); var x113 = vec4<f32>();
  for (var k0 = 0u; k0 < p.k; k0 += BK) {
    // As in matmul_tiled_128.wgsl: 2 vec4s per invocation, neighbours on neighbouring addresses.
    for (var e = 0u; e < 2u; e++) {
      let s = flat + e * 256u;
      var v: u32;
      var kk: u32;
      if (TRANS_B) { kk = s % BK; v = s / BK; } else { v = s % 32u; kk = s / 32u; }
      Bs[kk * ROW + v] = b_vec(k0 + kk, col0 + 4u * v);
    }
    workgroupBarrier();
    for (var kq = 0u; kq < BK; kq += w) {
      // Rows ty·4 … + 3 and 64 + ty·4 … + 3 of op(A) at column k0 + kq + seg: this invocation's share.
      let f0 = a_vec(row0 + ty * 4u, k0 + kq + seg);
      let f1 = a_vec(row0 + 64u + ty * 4u, k0 + kq + seg);
      for (var q = 0u; q < w; q++) {
        let a0 = subgroupShuffle(f0, first + q);
        let a1 = subgroupShuffle(f1, first + q);
        let kk = kq + q;
        let b0 = Bs[kk * ROW + tx];
        let b1 = Bs[kk * ROW + tx + 16u];
        x000 = fma(vec4<f32>(a0.x), b0, x000); x001 = fma(vec4<f32>(a0.y), b0, x001);
        x002 = fma(vec4<f32>(a0.z), b0, x002); x003 = fma(vec4<f32>(a0.w), b0, x003);
        x010 = fma(vec4<f32>(a0.x), b1, x010); x011 = fma(vec4<f32>(a0.y), b1, x011);
        x012 = fma(vec4<f32>(a0.z), b1, x012); x013 = fma(vec4<f32>(a0.w), b1, x013);
        x100 = fma(vec4<f32>(a1.x), b0, x100); x101 = fma(vec4<f32>(a1.y), b0, x101);
        x102 = fma(vec4<f32>(a1.z), b0, x102); x103 = fma(vec4<f32>(a1.w), b0, x103);
        x110 = fma(vec4<f32>(a1.x), b1, x110); x111 = fma(vec4<f32>(a1.y), b1, x111);
        x112 = fma(vec4<f32>(a1.z), b1, x112); x113 = fma(vec4<f32>(a1.w), b1, x113);
      }
    }
    // The next tile overwrites Bs: every invocation must be done reading this one.
    workgroupBarrier();
  }
  let i0 = row0 + ty * 4u;
  let i1 = i0 + 64u;
  let j0 = col0 + tx * 4u;
  let j1 = j0 + 64u;
  store4(i0, j0, x000); store4(i0 + 1u, j0, x001); store4(i0 + 2u, j0, x002); store4(i0 + 3u, j0, x003);
  store4(i0, j1, x010); store4(i0 + 1u, j1, x011); store4(i0 + 2u, j1, x012); store4(i0 + 3u, j1, x013);
  store4(i1, j0, x100); store4(i1 + 1u, j0, x101); store4(i1 + 2u, j0, x102); store4(i1 + 3u, j0, x103);
  store4(i1, j1, x110); store4(i1 + 1u, j1, x111); store4(i1 + 2u, j1, x112); store4(i1 + 3u, j1, x113);
}
