// FlashAttention-2 backward, shared-memory tiled variant for GPUs (Dao 2023, arXiv 2307.08691,
// Algorithm 2, split in two passes so that no two workgroups write one row and no float atomics
// are needed, docs/design.md#webgpu-limits-that-shape-the-kernels). D = rowsum(dO ∘ O) comes from the barrier-free
// `dsum` first.
//
//   `dq_tiled`:  one workgroup per (b, h, block of BR query rows), one invocation per query row
//                (q, dO and its dQ accumulator in private arrays); K and V tiles of BC rows in
//                workgroup memory. Per key: P = exp(scale·q·k − L), dP = dO·v,
//                dS = P (dP − D), dQ += scale·dS k.
//   `dkv_tiled`: one workgroup per (b, h, block of BR key rows), one invocation per key row
//                (k, v, dK, dV private); Q and dO tiles of BC rows in workgroup memory. Per query:
//                dV += P dO, dK += scale·dS q.
//
// Both accumulate (+=) into dqkv. Streamed rows lo … hi−1 per dispatch, as in the forward; causal
// blocks skip the tiles on the far side of the diagonal. Loop bounds and barriers depend only on
// the workgroup id and the uniform; rows past T compute on a clamped copy of row T−1 and are not
// stored. Layouts and bindings (same as the barrier-free `dq`, `dkv`) in
// flash_attention_common.wgsl. Where the device has `subgroups`, flash_attention_tiled_bwd_sg.wgsl
// replaces this file: the same entry points, the streamed rows shared by shuffle instead of tiles.
//!include flash_attention_common
//!include flash_attention_tiles

const BR: u32 = 64u;
const BC: u32 = 32u;

@compute @workgroup_size(BR)
fn dq_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let g = group_index(wid, groups);
  if (g >= tiled_groups(BR)) { return; }
  let blk = tiled_block(g, BR);
  let t = blk.first + lid;
  let tc = min(t, p.t - 1u);

  var q = ld_qkv_row(blk.qb + tc * blk.c3, p.scale);
  var go = ld_dy_row(blk.ob + tc * p.c);
  var a: array<vec4<f32>, HS4>;
  let lr = lse[blk.bh * p.t + tc];
  let dr = dd[blk.bh * p.t + tc];
  let lim = key_lim(tc);
  let end = key_end(blk.first, BR);
  for (var s0 = p.lo; s0 < end; s0 += BC) {
    let nk = min(BC, end - s0);
    stage_kv(blk, s0, nk, lid);
    workgroupBarrier();
    for (var k = 0u; k < nk; k++) {
      var s = vec4<f32>(0.0);
      var dp = vec4<f32>(0.0);
      for (var j = 0u; j < HS4; j++) {
        s = fma(q[j], atile[k * HS4 + j], s);
        dp = fma(go[j], btile[k * HS4 + j], dp);
      }
      let sv = select(NEG, (s.x + s.y) + (s.z + s.w), s0 + k < lim);
      let z = exp(sv - lr) * ((dp.x + dp.y) + (dp.z + dp.w) - dr);
      for (var j = 0u; j < HS4; j++) {
        a[j] = fma(vec4<f32>(z), atile[k * HS4 + j], a[j]);
      }
    }
    workgroupBarrier();
  }
  if (t >= p.t) { return; }
  st_out_row(blk.qb + t * blk.c3, a, p.scale, true);
}

@compute @workgroup_size(BR)
fn dkv_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let g = group_index(wid, groups);
  if (g >= tiled_groups(BR)) { return; }
  let blk = tiled_block(g, BR);
  let s = blk.first + lid;
  let sc = min(s, p.t - 1u);
  let lb = blk.bh * p.t;

  var k = ld_qkv_row(blk.kb + sc * blk.c3, p.scale);
  var v = ld_qkv_row(blk.vb + sc * blk.c3, 1.0);
  var dk: array<vec4<f32>, HS4>;
  var dv: array<vec4<f32>, HS4>;
  // Queries this key sees: qmin ≤ t < end; the block starts at its first key when causal.
  let end = min(p.t, p.hi);
  let start = query_start(blk.first);
  let qmin = query_min(sc);
  for (var t0 = start; t0 < end; t0 += BC) {
    let nq = min(BC, end - t0);
    for (var i = lid; i < nq * HS4; i += BR) {
      let r = t0 + i / HS4;
      let j = i % HS4;
      atile[i] = ld_qkv(blk.qb + r * blk.c3, j);
      btile[i] = ld_dy(blk.ob + r * p.c, j);
    }
    workgroupBarrier();
    for (var i = 0u; i < nq; i++) {
      let tq = t0 + i;
      var x = vec4<f32>(0.0);
      var dp = vec4<f32>(0.0);
      for (var j = 0u; j < HS4; j++) {
        x = fma(k[j], atile[i * HS4 + j], x);
        dp = fma(v[j], btile[i * HS4 + j], dp);
      }
      // L and D of one query: the same address for every invocation, a broadcast load.
      let sv = select(NEG, (x.x + x.y) + (x.z + x.w), tq >= qmin);
      let pv = exp(sv - lse[lb + tq]);
      let z = pv * ((dp.x + dp.y) + (dp.z + dp.w) - dd[lb + tq]);
      for (var j = 0u; j < HS4; j++) {
        dv[j] = fma(vec4<f32>(pv), btile[i * HS4 + j], dv[j]);
        dk[j] = fma(vec4<f32>(z), atile[i * HS4 + j], dk[j]);
      }
    }
    workgroupBarrier();
  }
  if (s >= p.t) { return; }
  st_out_row(blk.kb + s * blk.c3, dk, p.scale, true);
  st_out_row(blk.vb + s * blk.c3, dv, 1.0, true);
}
