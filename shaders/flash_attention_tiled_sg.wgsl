// FlashAttention-2 forward with subgroup operations: the variant of flash_attention_tiled.wgsl
// (same entry point name, bindings, grid of one workgroup per (b, h, block of BR query rows),
// one invocation per query row, same outputs and chunk carry-over) that flash_attention.ts picks
// where the device has `subgroups`. The backward's variant is flash_attention_tiled_bwd_sg.wgsl.
//
// Every query row reads every key and value of a tile, so the tiled kernel stages them in
// workgroup memory behind two barriers per tile. Here each subgroup streams its own: per step
// of W keys, the invocation at subgroup lane L < W loads key row s0 + L of K and of V into
// private arrays (kf, vf) and every lane reads the others' with subgroupShuffle; no workgroup
// memory, no barrier. W = min(subgroup_size, BR): the subgroup size S is read from the builtin,
// never assumed (WebGPU promises a power of two in [4, 128]; SwiftShader has 4, NVIDIA 32, AMD
// 32 or 64), and a workgroup of BR < S invocations is one partial subgroup whose lanes
// 0 … BR − 1 are the active ones (tests/kernels/row_reduce.test.ts checks that layout). Since
// S ≥ 4 and BR ∈ {16, 32, 64}, W is a multiple of 4: the keys go four at a time, with constant
// trip counts inside (4 keys, HS4 channels) so q, o, kf and vf stay in registers where a GPU
// compiler can keep them (docs/design.md#webgpu-limits-that-shape-the-kernels), and the online softmax rescales once
// per four keys instead of once per tile: the same sums, grouped differently.
//
// Causal: as in the tiled kernel, keys past the block's last query row are never loaded; a row
// masks keys s > t with NEG. The first group of the first chunk holds key 0, which every row
// sees, so m is finite from then on; groups wholly past the block's end are skipped (uniform).
// Rows past T compute on a clamped copy of row T−1, as do lanes loading keys past the end, so
// every lane takes part in every shuffle; neither is stored or counted.
enable subgroups;

//!include flash_attention_common

const BR: u32 = 64u;

@compute @workgroup_size(BR)
fn fwd_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let g = group_index(wid, groups);
  // Whole workgroups past the end return together, so the shuffles below stay in uniform control flow.
  if (g >= tiled_groups(BR)) { return; }
  let blk = tiled_block(g, BR);
  let t = blk.first + lid;
  let tc = min(t, p.t - 1u);
  let lrow = blk.bh * p.t + tc;
  // Uniform (subgroup_size and a constant), so the loops it bounds are too.
  let w = min(sg_size, BR);

  var q = ld_qkv_row(blk.qb + tc * blk.c3, p.scale);
  let r0 = fwd_row_start(blk.ob + tc * p.c, lrow);
  var o = r0.o;
  var m = r0.m;
  var l = r0.l;
  // Keys this row sees: s < lim; keys the block needs: s < end (uniform).
  let lim = key_lim(tc);
  let end = key_end(blk.first, BR);
  var kf: array<vec4<f32>, HS4>;
  var vf: array<vec4<f32>, HS4>;
  for (var s0 = p.lo; s0 < end; s0 += w) {
    // This lane's share: key row s0 + lane (clamped inside T; its scores are masked below).
    let r = min(s0 + lane, p.t - 1u) * blk.c3;
    kf = ld_qkv_row(blk.kb + r, 1.0);
    vf = ld_qkv_row(blk.vb + r, 1.0);
    for (var i0 = 0u; i0 < w; i0 += 4u) {
      if (s0 + i0 >= end) { break; }
      var sc = vec4<f32>(NEG);
      for (var u = 0u; u < 4u; u++) {
        var acc = vec4<f32>(0.0);
        for (var j = 0u; j < HS4; j++) {
          acc = fma(q[j], subgroupShuffle(kf[j], i0 + u), acc);
        }
        sc[u] = select(NEG, (acc.x + acc.y) + (acc.z + acc.w), s0 + i0 + u < lim);
      }
      let mn = max(m, max(max(sc.x, sc.y), max(sc.z, sc.w)));
      let alpha = exp(m - mn);
      let pk = exp(sc - vec4<f32>(mn));
      l = l * alpha + ((pk.x + pk.y) + (pk.z + pk.w));
      for (var j = 0u; j < HS4; j++) {
        var x = o[j] * alpha;
        x = fma(vec4<f32>(pk.x), subgroupShuffle(vf[j], i0), x);
        x = fma(vec4<f32>(pk.y), subgroupShuffle(vf[j], i0 + 1u), x);
        x = fma(vec4<f32>(pk.z), subgroupShuffle(vf[j], i0 + 2u), x);
        o[j] = fma(vec4<f32>(pk.w), subgroupShuffle(vf[j], i0 + 3u), x);
      }
      m = mn;
    }
  }
  if (t >= p.t) { return; }
  fwd_row_store(blk.ob + t * p.c, lrow, o, m, l);
}
