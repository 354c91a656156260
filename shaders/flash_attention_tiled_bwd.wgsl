// FlashAttention-2 backward, shared-memory tiled variant for GPUs (Dao 2023, arXiv 2307.08691,
// Algorithm 2, split in two passes so that no two workgroups write one row and no float atomics
// are needed, docs/design.md §9). D = rowsum(dO ∘ O) comes from the barrier-free `dsum` first.
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

const BR: u32 = 64u;
const BC: u32 = 32u;

var<workgroup> atile: array<vec4<f32>, BC * HS4>;
var<workgroup> btile: array<vec4<f32>, BC * HS4>;

@compute @workgroup_size(BR)
fn dq_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let blocks = (p.t + BR - 1u) / BR;
  let g = group_index(wid, groups);
  if (g >= p.b * p.nh * blocks) { return; }
  let bh = g / blocks;
  let first_row = (g % blocks) * BR;
  let h = bh % p.nh;
  let tok0 = (bh / p.nh) * p.t;
  let c3 = 3u * p.c;
  let t = first_row + lid;
  let tc = min(t, p.t - 1u);
  let qb = tok0 * c3 + h * HS;
  let kb = qb + p.c;
  let vb = kb + p.c;
  let ob = tok0 * p.c + h * HS;

  var q: array<vec4<f32>, HS4>;
  var go: array<vec4<f32>, HS4>;
  var a: array<vec4<f32>, HS4>;
  for (var j = 0u; j < HS4; j++) {
    q[j] = ld_qkv(qb + tc * c3, j) * p.scale;
    go[j] = ld_dy(ob + tc * p.c, j);
    a[j] = vec4<f32>(0.0);
  }
  let lr = lse[bh * p.t + tc];
  let dr = dd[bh * p.t + tc];
  var lim = min(p.t, p.hi);
  var end = lim;
  if (p.causal != 0u) {
    lim = min(lim, tc + 1u);
    end = min(end, min(p.t, first_row + BR));
  }
  for (var s0 = p.lo; s0 < end; s0 += BC) {
    let nk = min(BC, end - s0);
    for (var i = lid; i < nk * HS4; i += BR) {
      let r = (s0 + i / HS4) * c3;
      let j = i % HS4;
      atile[i] = ld_qkv(kb + r, j);
      btile[i] = ld_qkv(vb + r, j);
    }
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
  for (var j = 0u; j < HS4; j++) {
    st_out(qb + t * c3, j, a[j] * p.scale, true);
  }
}

@compute @workgroup_size(BR)
fn dkv_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let blocks = (p.t + BR - 1u) / BR;
  let g = group_index(wid, groups);
  if (g >= p.b * p.nh * blocks) { return; }
  let bh = g / blocks;
  let first_key = (g % blocks) * BR;
  let h = bh % p.nh;
  let tok0 = (bh / p.nh) * p.t;
  let c3 = 3u * p.c;
  let s = first_key + lid;
  let sc = min(s, p.t - 1u);
  let qb = tok0 * c3 + h * HS;
  let kb = qb + p.c;
  let vb = kb + p.c;
  let ob = tok0 * p.c + h * HS;
  let lb = bh * p.t;

  var k: array<vec4<f32>, HS4>;
  var v: array<vec4<f32>, HS4>;
  var dk: array<vec4<f32>, HS4>;
  var dv: array<vec4<f32>, HS4>;
  for (var j = 0u; j < HS4; j++) {
    k[j] = ld_qkv(kb + sc * c3, j) * p.scale;
    v[j] = ld_qkv(vb + sc * c3, j);
    dk[j] = vec4<f32>(0.0);
    dv[j] = vec4<f32>(0.0);
  }
  // Queries this key sees: from ≤ t < end; the block starts at its first key when causal.
  let end = min(p.t, p.hi);
  var start = p.lo;
  var qmin = 0u;
  if (p.causal != 0u) {
    start = max(start, first_key);
    qmin = sc;
  }
  for (var t0 = start; t0 < end; t0 += BC) {
    let nq = min(BC, end - t0);
    for (var i = lid; i < nq * HS4; i += BR) {
      let r = t0 + i / HS4;
      let j = i % HS4;
      atile[i] = ld_qkv(qb + r * c3, j);
      btile[i] = ld_dy(ob + r * p.c, j);
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
  for (var j = 0u; j < HS4; j++) {
    st_out(kb + s * c3, j, dk[j] * p.scale, true);
    st_out(vb + s * c3, j, dv[j], true);
  }
}
