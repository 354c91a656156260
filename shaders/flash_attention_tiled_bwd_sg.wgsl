// FlashAttention-2 backward with subgroup operations (Dao 2023, arXiv 2307.08691, Algorithm 2
// in the two passes of flash_attention_tiled_bwd.wgsl): the variant flash_attention.ts picks
// where the device has `subgroups`. Same entry point names, bindings, grid (one workgroup per
// (b, h, block of BR rows), one invocation per row), the same `+=` into dqkv and the same
// per-dispatch rows lo … hi−1; D comes from the barrier-free `dsum` as before.
//
// In the tiled kernels every row of a block reads every streamed row of the other side (K, V for
// `dq_tiled`; Q, dO for `dkv_tiled`), so they are staged in workgroup memory behind two barriers
// per tile. Here each subgroup streams its own, as the subgroup forward does: per step of W rows,
// lane L < W loads streamed row r0 + L into private arrays (and, for `dkv_tiled`, that query's L
// and D, which the tiled kernel reads as a same-address load from every invocation), and every
// lane reads the others' with subgroupShuffle; no workgroup memory, no barrier. W = min(S, BR)
// with S from the `subgroup_size` builtin, never assumed (4 on SwiftShader, 32 or 64 on GPUs);
// a workgroup of BR < S is one partial subgroup whose lanes 0 … BR − 1 are the active ones
// (tests/kernels/row_reduce.test.ts checks that layout). S ≥ 4 and BR ∈ {16, 32, 64} make W a
// multiple of 4, so the rows go four at a time with constant trip counts inside (4 rows, HS4
// channels), which a GPU compiler can unroll to keep the arrays in registers
// (docs/design.md#webgpu-limits-that-shape-the-kernels).
//
// There is no online softmax here (L is known), so every accumulator gets the same products in
// the same order as in the tiled kernels, plus exact zeros from masked rows. A streamed row is shuffled twice (scores, then the
// update) rather than kept in a fourth private array: registers, not shuffles, are what limits
// a block at hs = 128. Lanes loading rows past the end read a clamped copy of row T−1 and get
// score NEG, so P = exp(NEG − L) = 0 and they add nothing; every lane takes part in every
// shuffle. Loop bounds depend only on the workgroup id, the uniform and the subgroup size.
enable subgroups;

//!include flash_attention_common

const BR: u32 = 64u;

@compute @workgroup_size(BR)
fn dq_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let g = group_index(wid, groups);
  // Whole workgroups past the end return together, so the shuffles stay in uniform control flow.
  if (g >= tiled_groups(BR)) { return; }
  let blk = tiled_block(g, BR);
  let t = blk.first + lid;
  let tc = min(t, p.t - 1u);
  let w = min(sg_size, BR);

  var q = ld_qkv_row(blk.qb + tc * blk.c3, p.scale);
  var go = ld_dy_row(blk.ob + tc * p.c);
  var a: array<vec4<f32>, HS4>;
  let lr = lse[blk.bh * p.t + tc];
  let dr = dd[blk.bh * p.t + tc];
  // Keys this row sees: s < lim; keys the block needs: s < end (uniform); lim ≤ end.
  let lim = key_lim(tc);
  let end = key_end(blk.first, BR);
  var kf: array<vec4<f32>, HS4>;
  var vf: array<vec4<f32>, HS4>;
  for (var s0 = p.lo; s0 < end; s0 += w) {
    let r = min(s0 + lane, p.t - 1u) * blk.c3;
    kf = ld_qkv_row(blk.kb + r, 1.0);
    vf = ld_qkv_row(blk.vb + r, 1.0);
    for (var i0 = 0u; i0 < w; i0 += 4u) {
      if (s0 + i0 >= end) { break; }
      var sc = vec4<f32>(NEG);
      var dp = vec4<f32>(0.0);
      for (var u = 0u; u < 4u; u++) {
        var x = vec4<f32>(0.0);
        var y = vec4<f32>(0.0);
        for (var j = 0u; j < HS4; j++) {
          x = fma(q[j], subgroupShuffle(kf[j], i0 + u), x);
          y = fma(go[j], subgroupShuffle(vf[j], i0 + u), y);
        }
        sc[u] = select(NEG, (x.x + x.y) + (x.z + x.w), s0 + i0 + u < lim);
        dp[u] = (y.x + y.y) + (y.z + y.w);
      }
      // dS = P (dP − D) of the four keys.
      let z = exp(sc - vec4<f32>(lr)) * (dp - vec4<f32>(dr));
      for (var j = 0u; j < HS4; j++) {
        var x = fma(vec4<f32>(z.x), subgroupShuffle(kf[j], i0), a[j]);
        x = fma(vec4<f32>(z.y), subgroupShuffle(kf[j], i0 + 1u), x);
        x = fma(vec4<f32>(z.z), subgroupShuffle(kf[j], i0 + 2u), x);
        a[j] = fma(vec4<f32>(z.w), subgroupShuffle(kf[j], i0 + 3u), x);
      }
    }
  }
  if (t >= p.t) { return; }
  st_out_row(blk.qb + t * blk.c3, a, p.scale, true);
}

@compute @workgroup_size(BR)
fn dkv_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let g = group_index(wid, groups);
  if (g >= tiled_groups(BR)) { return; }
  let blk = tiled_block(g, BR);
  let s = blk.first + lid;
  let sc = min(s, p.t - 1u);
  let lb = blk.bh * p.t;
  let w = min(sg_size, BR);

  var k = ld_qkv_row(blk.kb + sc * blk.c3, p.scale);
  var v = ld_qkv_row(blk.vb + sc * blk.c3, 1.0);
  var dk: array<vec4<f32>, HS4>;
  var dv: array<vec4<f32>, HS4>;
  // Queries this key sees: qmin ≤ t < end; the block starts at its first key when causal.
  let end = min(p.t, p.hi);
  let start = query_start(blk.first);
  let qmin = query_min(sc);
  var qf: array<vec4<f32>, HS4>;
  var gf: array<vec4<f32>, HS4>;
  for (var t0 = start; t0 < end; t0 += w) {
    let r = min(t0 + lane, p.t - 1u);
    qf = ld_qkv_row(blk.qb + r * blk.c3, 1.0);
    gf = ld_dy_row(blk.ob + r * p.c);
    let lf = lse[lb + r];
    let df = dd[lb + r];
    for (var i0 = 0u; i0 < w; i0 += 4u) {
      if (t0 + i0 >= end) { break; }
      var sv = vec4<f32>(NEG);
      var dp = vec4<f32>(0.0);
      var lq = vec4<f32>(0.0);
      var dr = vec4<f32>(0.0);
      for (var u = 0u; u < 4u; u++) {
        let tq = t0 + i0 + u;
        var x = vec4<f32>(0.0);
        var y = vec4<f32>(0.0);
        for (var j = 0u; j < HS4; j++) {
          x = fma(k[j], subgroupShuffle(qf[j], i0 + u), x);
          y = fma(v[j], subgroupShuffle(gf[j], i0 + u), y);
        }
        // Unlike the tiled kernel, a group of four may run past `end`: those queries are masked.
        sv[u] = select(NEG, (x.x + x.y) + (x.z + x.w), tq >= qmin && tq < end);
        dp[u] = (y.x + y.y) + (y.z + y.w);
        lq[u] = subgroupShuffle(lf, i0 + u);
        dr[u] = subgroupShuffle(df, i0 + u);
      }
      let pv = exp(sv - lq);
      let z = pv * (dp - dr);
      for (var j = 0u; j < HS4; j++) {
        var x = fma(vec4<f32>(pv.x), subgroupShuffle(gf[j], i0), dv[j]);
        x = fma(vec4<f32>(pv.y), subgroupShuffle(gf[j], i0 + 1u), x);
        x = fma(vec4<f32>(pv.z), subgroupShuffle(gf[j], i0 + 2u), x);
        dv[j] = fma(vec4<f32>(pv.w), subgroupShuffle(gf[j], i0 + 3u), x);
        var y = fma(vec4<f32>(z.x), subgroupShuffle(qf[j], i0), dk[j]);
        y = fma(vec4<f32>(z.y), subgroupShuffle(qf[j], i0 + 1u), y);
        y = fma(vec4<f32>(z.z), subgroupShuffle(qf[j], i0 + 2u), y);
        dk[j] = fma(vec4<f32>(z.w), subgroupShuffle(qf[j], i0 + 3u), y);
      }
    }
  }
  if (s >= p.t) { return; }
  st_out_row(blk.kb + s * blk.c3, dk, p.scale, true);
  st_out_row(blk.vb + s * blk.c3, dv, 1.0, true);
}
