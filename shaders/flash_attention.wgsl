// FlashAttention-2 forward (`fwd`); the header, layouts, bindings and helpers are in
// flash_attention_common.wgsl, the backward in flash_attention_bwd.wgsl.
//!include flash_attention_common

// ---- forward ----------------------------------------------------------------------------

@compute @workgroup_size(WG)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  // Four query rows t0 … t0+3 of one (b, h) per invocation: every K/V load feeds four rows.
  let item = row_index(gid, groups);
  let per = (p.t + 3u) / 4u;
  if (item >= p.b * p.nh * per) { return; }
  let bh = item / per;
  let t0 = (item % per) * 4u;
  let h = bh % p.nh;
  let tok0 = (bh / p.nh) * p.t;
  let c3 = 3u * p.c;
  let lastt = p.t - 1u;
  let ta = vec4<u32>(min(t0, lastt), min(t0 + 1u, lastt), min(t0 + 2u, lastt), min(t0 + 3u, lastt));
  let kb = tok0 * c3 + p.c + h * HS;
  let vb = kb + p.c;

  var q0: array<vec4<f32>, HS4>;
  var q1: array<vec4<f32>, HS4>;
  var q2: array<vec4<f32>, HS4>;
  var q3: array<vec4<f32>, HS4>;
  var o0: array<vec4<f32>, HS4>;
  var o1: array<vec4<f32>, HS4>;
  var o2: array<vec4<f32>, HS4>;
  var o3: array<vec4<f32>, HS4>;
  let qb = tok0 * c3 + h * HS;
  let yb = tok0 * p.c + h * HS;
  let lb = bh * p.t;
  // A chunk after the first resumes from the unnormalised O (in y), m (in lse) and ℓ (in lsum).
  let resume = p.first == 0u;
  for (var j = 0u; j < p.hs4; j++) {
    q0[j] = ld_qkv(qb + ta.x * c3, j) * p.scale;
    q1[j] = ld_qkv(qb + ta.y * c3, j) * p.scale;
    q2[j] = ld_qkv(qb + ta.z * c3, j) * p.scale;
    q3[j] = ld_qkv(qb + ta.w * c3, j) * p.scale;
    if (resume) {
      o0[j] = ld_out(yb + ta.x * p.c, j);
      o1[j] = ld_out(yb + ta.y * p.c, j);
      o2[j] = ld_out(yb + ta.z * p.c, j);
      o3[j] = ld_out(yb + ta.w * p.c, j);
    } else {
      o0[j] = vec4<f32>(0.0);
      o1[j] = vec4<f32>(0.0);
      o2[j] = vec4<f32>(0.0);
      o3[j] = vec4<f32>(0.0);
    }
  }
  // Keys row r sees: s < lim[r].
  var lim = vec4<u32>(p.t);
  if (p.causal != 0u) { lim = ta + vec4<u32>(1u); }
  let len = max(max(lim.x, lim.y), max(lim.z, lim.w));
  let last = len - 1u;
  var m = vec4<f32>(NEG);
  var l = vec4<f32>(0.0);
  if (resume) {
    m = vec4<f32>(lseo[lb + ta.x], lseo[lb + ta.y], lseo[lb + ta.z], lseo[lb + ta.w]);
    l = vec4<f32>(lsum[lb + ta.x], lsum[lb + ta.y], lsum[lb + ta.z], lsum[lb + ta.w]);
  }
  // The first chunk starts at key 0, which every row sees, so m is finite after its first step.
  for (var s0 = p.lo; s0 < min(len, p.hi); s0 += 4u) {
    // Keys past `last` read a valid row (clamped) and are masked.
    let r0 = s0 * c3;
    let r1 = min(s0 + 1u, last) * c3;
    let r2 = min(s0 + 2u, last) * c3;
    let r3 = min(s0 + 3u, last) * c3;
    // s<r>: scores of row r against keys s0 … s0+3.
    var sa = vec4<f32>(0.0);
    var sb = vec4<f32>(0.0);
    var sc = vec4<f32>(0.0);
    var sd = vec4<f32>(0.0);
    for (var j = 0u; j < p.hs4; j++) {
      let k0 = ld_qkv(kb + r0, j);
      let k1 = ld_qkv(kb + r1, j);
      let k2 = ld_qkv(kb + r2, j);
      let k3 = ld_qkv(kb + r3, j);
      let a = q0[j];
      let b = q1[j];
      let c = q2[j];
      let d = q3[j];
      sa += vec4<f32>(dot(a, k0), dot(a, k1), dot(a, k2), dot(a, k3));
      sb += vec4<f32>(dot(b, k0), dot(b, k1), dot(b, k2), dot(b, k3));
      sc += vec4<f32>(dot(c, k0), dot(c, k1), dot(c, k2), dot(c, k3));
      sd += vec4<f32>(dot(d, k0), dot(d, k1), dot(d, k2), dot(d, k3));
    }
    sa = mask4(sa, s0, lim.x);
    sb = mask4(sb, s0, lim.y);
    sc = mask4(sc, s0, lim.z);
    sd = mask4(sd, s0, lim.w);
    let mx = vec4<f32>(
      max(max(sa.x, sa.y), max(sa.z, sa.w)),
      max(max(sb.x, sb.y), max(sb.z, sb.w)),
      max(max(sc.x, sc.y), max(sc.z, sc.w)),
      max(max(sd.x, sd.y), max(sd.z, sd.w)),
    );
    let mn = max(m, mx);
    let alpha = exp(m - mn);
    let pa = exp(sa - vec4<f32>(mn.x));
    let pb = exp(sb - vec4<f32>(mn.y));
    let pc = exp(sc - vec4<f32>(mn.z));
    let pd = exp(sd - vec4<f32>(mn.w));
    l = l * alpha + vec4<f32>(dot(pa, vec4<f32>(1.0)), dot(pb, vec4<f32>(1.0)), dot(pc, vec4<f32>(1.0)), dot(pd, vec4<f32>(1.0)));
    for (var j = 0u; j < p.hs4; j++) {
      let v0 = ld_qkv(vb + r0, j);
      let v1 = ld_qkv(vb + r1, j);
      let v2 = ld_qkv(vb + r2, j);
      let v3 = ld_qkv(vb + r3, j);
      o0[j] = fma(vec4<f32>(pa.x), v0, fma(vec4<f32>(pa.y), v1, fma(vec4<f32>(pa.z), v2, fma(vec4<f32>(pa.w), v3, o0[j] * alpha.x))));
      o1[j] = fma(vec4<f32>(pb.x), v0, fma(vec4<f32>(pb.y), v1, fma(vec4<f32>(pb.z), v2, fma(vec4<f32>(pb.w), v3, o1[j] * alpha.y))));
      o2[j] = fma(vec4<f32>(pc.x), v0, fma(vec4<f32>(pc.y), v1, fma(vec4<f32>(pc.z), v2, fma(vec4<f32>(pc.w), v3, o2[j] * alpha.z))));
      o3[j] = fma(vec4<f32>(pd.x), v0, fma(vec4<f32>(pd.y), v1, fma(vec4<f32>(pd.z), v2, fma(vec4<f32>(pd.w), v3, o3[j] * alpha.w))));
    }
    m = mn;
  }
  var inv = vec4<f32>(1.0) / l;
  var lv = m + log(l);
  if (p.final_ == 0u) {
    inv = vec4<f32>(1.0);
    lv = m;
    lsum[lb + t0] = l.x;
    if (t0 + 1u < p.t) { lsum[lb + t0 + 1u] = l.y; }
    if (t0 + 2u < p.t) { lsum[lb + t0 + 2u] = l.z; }
    if (t0 + 3u < p.t) { lsum[lb + t0 + 3u] = l.w; }
  }
  // Rows past T (clamped duplicates of the last one) are not stored.
  for (var j = 0u; j < p.hs4; j++) {
    st_out(yb + t0 * p.c, j, o0[j] * inv.x, false);
    if (t0 + 1u < p.t) { st_out(yb + (t0 + 1u) * p.c, j, o1[j] * inv.y, false); }
    if (t0 + 2u < p.t) { st_out(yb + (t0 + 2u) * p.c, j, o2[j] * inv.z, false); }
    if (t0 + 3u < p.t) { st_out(yb + (t0 + 3u) * p.c, j, o3[j] * inv.w, false); }
  }
  lseo[lb + t0] = lv.x;
  if (t0 + 1u < p.t) { lseo[lb + t0 + 1u] = lv.y; }
  if (t0 + 2u < p.t) { lseo[lb + t0 + 2u] = lv.z; }
  if (t0 + 3u < p.t) { lseo[lb + t0 + 3u] = lv.w; }
}
