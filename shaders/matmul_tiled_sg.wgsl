// The subgroup variant of matmul_tiled.wgsl, which matmul.ts picks where the device has
// `subgroups`: same bindings, parameters, 64×64 block of C per workgroup and 4×4 block per
// invocation, same result,
//   C (M,N) = alpha · op(A) · op(B) + beta · C (+ bias, broadcast over rows).
//
// op(B) is still staged in workgroup memory; op(A) is not. The 16 invocations of one thread
// row ty all need the same four rows of op(A) at each kk, so each loads one vec4 of them from
// storage (its own rows, at one column) and the others read it with subgroupShuffle instead of
// going through workgroup memory and its barrier. With subgroups of size S, a thread row meets
// them in aligned segments of W = min(S, 16) invocations, each inside one subgroup: per step of
// W columns of the BK = 16, the invocation at position seg of its segment loads column seg and
// the segment shuffles the W vec4s around (16 / W steps per tile; one when S ≥ 16).
//
// S is read from the subgroup_size builtin, never assumed: WebGPU only promises a power of two
// in [4, 128] (4 on SwiftShader, 32 on NVIDIA, 32 or 64 on AMD, 8–32 on Intel), and it can
// differ between pipelines on one device. Every size gives the same sums in the same order, so
// results do not depend on it. The workgroup is 1D (256) with tx = lid % 16, ty = lid / 16,
// and the segment's lanes are taken to be consecutive, starting at subgroup_invocation_id − seg:
// the layout backends give a 1D workgroup (invocation lid at lane lid % S of subgroup lid / S)
// that tests/kernels/row_reduce.test.ts checks for a workgroup of 256 on the test adapter.
//
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 bias (read), 4 params.
enable subgroups;

//!include matmul_tiled_common

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> Bs: array<f32, 1024>; // [BK][BN]

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
  // accR: row ty·4 + R, columns tx·4 … tx·4 + 3; named, not an array
  // (docs/design.md#webgpu-limits-that-shape-the-kernels).
  var acc0 = vec4<f32>();
  var acc1 = vec4<f32>();
  var acc2 = vec4<f32>();
  var acc3 = vec4<f32>();
  for (var k0 = 0u; k0 < p.k; k0 += BK) {
    // As in matmul_tiled.wgsl: 4 elements per invocation, neighbours on neighbouring addresses.
    for (var e = 0u; e < 4u; e++) {
      let idx = flat + e * 256u;
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
    for (var kq = 0u; kq < BK; kq += w) {
      // Rows ty·4 … ty·4 + 3 of op(A) at column k0 + kq + seg: this invocation's share.
      let frag = a_vec(row0 + ty * 4u, k0 + kq + seg);
      for (var q = 0u; q < w; q++) {
        let av = subgroupShuffle(frag, first + q);
        let kk = kq + q;
        let bv = vec4<f32>(Bs[kk * BN + tx * 4u], Bs[kk * BN + tx * 4u + 1u], Bs[kk * BN + tx * 4u + 2u], Bs[kk * BN + tx * 4u + 3u]);
        acc0 = fma(vec4<f32>(av.x), bv, acc0);
        acc1 = fma(vec4<f32>(av.y), bv, acc1);
        acc2 = fma(vec4<f32>(av.z), bv, acc2);
        acc3 = fma(vec4<f32>(av.w), bv, acc3);
      }
    }
    // The next tile overwrites Bs: every invocation must be done reading this one.
    workgroupBarrier();
  }
  let i0 = row0 + ty * 4u;
  let j0 = col0 + tx * 4u;
  store4(i0, j0, acc0);
  store4(i0 + 1u, j0, acc1);
  store4(i0 + 2u, j0, acc2);
  store4(i0 + 3u, j0, acc3);
}
