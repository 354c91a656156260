// FlashAttention-2 backward (`dsum`, `dq`, `dkv`); the header, layouts, bindings and
// helpers are in flash_attention_common.wgsl, the forward in flash_attention.wgsl.
//!include flash_attention_common

// ---- backward ---------------------------------------------------------------------------

// D = rowsum(dO ∘ O), one invocation per (b, h, t).
@compute @workgroup_size(WG)
fn dsum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let row = row_index(gid, groups);
  if (row >= p.rows) { return; }
  let t = row % p.t;
  let bh = row / p.t;
  let h = bh % p.nh;
  let tok0 = (bh / p.nh) * p.t;
  let yb = (tok0 + t) * p.c + h * HS;
  var acc = vec4<f32>(0.0);
  for (var j = 0u; j < p.hs4; j++) {
    acc = fma(ld_dy(yb, j), ld_y(yb, j), acc);
  }
  out[row] = (acc.x + acc.y) + (acc.z + acc.w);
}

// Masks lanes i whose streamed row first + i is outside [lo, n).
fn mask4_range(s: vec4<f32>, first: u32, lo: u32, n: u32) -> vec4<f32> {
  let idx = vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u);
  return select(s, vec4<f32>(NEG), (idx >= vec4<u32>(n)) | (idx < vec4<u32>(lo)));
}

// dQ += scale·dS K: four query rows t0 … t0+3 of one (b, h) per invocation, streaming the keys
// they see; P and dS are recomputed from L and D.
@compute @workgroup_size(WG)
fn dq(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
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
  let qb = tok0 * c3 + h * HS;
  let kb = qb + p.c;
  let vb = kb + p.c;
  let ob = tok0 * p.c + h * HS;
  let lb = bh * p.t;

  var q0: array<vec4<f32>, HS4>;
  var q1: array<vec4<f32>, HS4>;
  var q2: array<vec4<f32>, HS4>;
  var q3: array<vec4<f32>, HS4>;
  var g0: array<vec4<f32>, HS4>;
  var g1: array<vec4<f32>, HS4>;
  var g2: array<vec4<f32>, HS4>;
  var g3: array<vec4<f32>, HS4>;
  var a0: array<vec4<f32>, HS4>;
  var a1: array<vec4<f32>, HS4>;
  var a2: array<vec4<f32>, HS4>;
  var a3: array<vec4<f32>, HS4>;
  for (var j = 0u; j < p.hs4; j++) {
    q0[j] = ld_qkv(qb + ta.x * c3, j) * p.scale;
    q1[j] = ld_qkv(qb + ta.y * c3, j) * p.scale;
    q2[j] = ld_qkv(qb + ta.z * c3, j) * p.scale;
    q3[j] = ld_qkv(qb + ta.w * c3, j) * p.scale;
    g0[j] = ld_dy(ob + ta.x * p.c, j);
    g1[j] = ld_dy(ob + ta.y * p.c, j);
    g2[j] = ld_dy(ob + ta.z * p.c, j);
    g3[j] = ld_dy(ob + ta.w * p.c, j);
    a0[j] = vec4<f32>(0.0);
    a1[j] = vec4<f32>(0.0);
    a2[j] = vec4<f32>(0.0);
    a3[j] = vec4<f32>(0.0);
  }
  let lr = vec4<f32>(lse[lb + ta.x], lse[lb + ta.y], lse[lb + ta.z], lse[lb + ta.w]);
  let dr = vec4<f32>(dd[lb + ta.x], dd[lb + ta.y], dd[lb + ta.z], dd[lb + ta.w]);
  var lim = vec4<u32>(p.t);
  if (p.causal != 0u) { lim = ta + vec4<u32>(1u); }
  let len = max(max(lim.x, lim.y), max(lim.z, lim.w));
  let last = len - 1u;
  for (var s0 = p.lo; s0 < min(len, p.hi); s0 += 4u) {
    let r0 = s0 * c3;
    let r1 = min(s0 + 1u, last) * c3;
    let r2 = min(s0 + 2u, last) * c3;
    let r3 = min(s0 + 3u, last) * c3;
    // s<r>, d<r>: scores and dP of query row r against keys s0 … s0+3.
    var sa = vec4<f32>(0.0);
    var sb = vec4<f32>(0.0);
    var sc = vec4<f32>(0.0);
    var sd = vec4<f32>(0.0);
    var da = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    var dc = vec4<f32>(0.0);
    var dd4 = vec4<f32>(0.0);
    for (var j = 0u; j < p.hs4; j++) {
      let k0 = ld_qkv(kb + r0, j);
      let k1 = ld_qkv(kb + r1, j);
      let k2 = ld_qkv(kb + r2, j);
      let k3 = ld_qkv(kb + r3, j);
      let v0 = ld_qkv(vb + r0, j);
      let v1 = ld_qkv(vb + r1, j);
      let v2 = ld_qkv(vb + r2, j);
      let v3 = ld_qkv(vb + r3, j);
      var x = q0[j];
      sa += vec4<f32>(dot(x, k0), dot(x, k1), dot(x, k2), dot(x, k3));
      x = q1[j];
      sb += vec4<f32>(dot(x, k0), dot(x, k1), dot(x, k2), dot(x, k3));
      x = q2[j];
      sc += vec4<f32>(dot(x, k0), dot(x, k1), dot(x, k2), dot(x, k3));
      x = q3[j];
      sd += vec4<f32>(dot(x, k0), dot(x, k1), dot(x, k2), dot(x, k3));
      x = g0[j];
      da += vec4<f32>(dot(x, v0), dot(x, v1), dot(x, v2), dot(x, v3));
      x = g1[j];
      db += vec4<f32>(dot(x, v0), dot(x, v1), dot(x, v2), dot(x, v3));
      x = g2[j];
      dc += vec4<f32>(dot(x, v0), dot(x, v1), dot(x, v2), dot(x, v3));
      x = g3[j];
      dd4 += vec4<f32>(dot(x, v0), dot(x, v1), dot(x, v2), dot(x, v3));
    }
    let za = exp(mask4(sa, s0, lim.x) - vec4<f32>(lr.x)) * (da - vec4<f32>(dr.x));
    let zb = exp(mask4(sb, s0, lim.y) - vec4<f32>(lr.y)) * (db - vec4<f32>(dr.y));
    let zc = exp(mask4(sc, s0, lim.z) - vec4<f32>(lr.z)) * (dc - vec4<f32>(dr.z));
    let zd = exp(mask4(sd, s0, lim.w) - vec4<f32>(lr.w)) * (dd4 - vec4<f32>(dr.w));
    for (var j = 0u; j < p.hs4; j++) {
      let k0 = ld_qkv(kb + r0, j);
      let k1 = ld_qkv(kb + r1, j);
      let k2 = ld_qkv(kb + r2, j);
      let k3 = ld_qkv(kb + r3, j);
      a0[j] = fma(vec4<f32>(za.x), k0, fma(vec4<f32>(za.y), k1, fma(vec4<f32>(za.z), k2, fma(vec4<f32>(za.w), k3, a0[j]))));
      a1[j] = fma(vec4<f32>(zb.x), k0, fma(vec4<f32>(zb.y), k1, fma(vec4<f32>(zb.z), k2, fma(vec4<f32>(zb.w), k3, a1[j]))));
      a2[j] = fma(vec4<f32>(zc.x), k0, fma(vec4<f32>(zc.y), k1, fma(vec4<f32>(zc.z), k2, fma(vec4<f32>(zc.w), k3, a2[j]))));
      a3[j] = fma(vec4<f32>(zd.x), k0, fma(vec4<f32>(zd.y), k1, fma(vec4<f32>(zd.z), k2, fma(vec4<f32>(zd.w), k3, a3[j]))));
    }
  }
  // Rows past T (clamped duplicates of the last one) are not stored.
  for (var j = 0u; j < p.hs4; j++) {
    st_out(qb + t0 * c3, j, a0[j] * p.scale, true);
    if (t0 + 1u < p.t) { st_out(qb + (t0 + 1u) * c3, j, a1[j] * p.scale, true); }
    if (t0 + 2u < p.t) { st_out(qb + (t0 + 2u) * c3, j, a2[j] * p.scale, true); }
    if (t0 + 3u < p.t) { st_out(qb + (t0 + 3u) * c3, j, a3[j] * p.scale, true); }
  }
}

// dK += scale·dSᵀ Q and dV += Pᵀ dO: four key rows s0 … s0+3 of one (b, h) per invocation,
// streaming the queries that see them (t ≥ s when causal).
@compute @workgroup_size(WG)
fn dkv(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let item = row_index(gid, groups);
  let per = (p.t + 3u) / 4u;
  if (item >= p.b * p.nh * per) { return; }
  let bh = item / per;
  let s0 = (item % per) * 4u;
  let h = bh % p.nh;
  let tok0 = (bh / p.nh) * p.t;
  let c3 = 3u * p.c;
  let last = p.t - 1u;
  let sa4 = vec4<u32>(min(s0, last), min(s0 + 1u, last), min(s0 + 2u, last), min(s0 + 3u, last));
  let qb = tok0 * c3 + h * HS;       // query t at qb + t·c3
  let kb = qb + p.c;
  let vb = kb + p.c;
  let ob = tok0 * p.c + h * HS;      // dO of query t at ob + t·c
  let lb = bh * p.t;                 // L, D of query t at lb + t

  var k0: array<vec4<f32>, HS4>;
  var k1: array<vec4<f32>, HS4>;
  var k2: array<vec4<f32>, HS4>;
  var k3: array<vec4<f32>, HS4>;
  var v0: array<vec4<f32>, HS4>;
  var v1: array<vec4<f32>, HS4>;
  var v2: array<vec4<f32>, HS4>;
  var v3: array<vec4<f32>, HS4>;
  var dk0: array<vec4<f32>, HS4>;
  var dk1: array<vec4<f32>, HS4>;
  var dk2: array<vec4<f32>, HS4>;
  var dk3: array<vec4<f32>, HS4>;
  var dv0: array<vec4<f32>, HS4>;
  var dv1: array<vec4<f32>, HS4>;
  var dv2: array<vec4<f32>, HS4>;
  var dv3: array<vec4<f32>, HS4>;
  for (var j = 0u; j < p.hs4; j++) {
    k0[j] = ld_qkv(kb + sa4.x * c3, j) * p.scale;
    k1[j] = ld_qkv(kb + sa4.y * c3, j) * p.scale;
    k2[j] = ld_qkv(kb + sa4.z * c3, j) * p.scale;
    k3[j] = ld_qkv(kb + sa4.w * c3, j) * p.scale;
    v0[j] = ld_qkv(vb + sa4.x * c3, j);
    v1[j] = ld_qkv(vb + sa4.y * c3, j);
    v2[j] = ld_qkv(vb + sa4.z * c3, j);
    v3[j] = ld_qkv(vb + sa4.w * c3, j);
    dk0[j] = vec4<f32>(0.0);
    dk1[j] = vec4<f32>(0.0);
    dk2[j] = vec4<f32>(0.0);
    dk3[j] = vec4<f32>(0.0);
    dv0[j] = vec4<f32>(0.0);
    dv1[j] = vec4<f32>(0.0);
    dv2[j] = vec4<f32>(0.0);
    dv3[j] = vec4<f32>(0.0);
  }
  // Key r sees queries lo[r] ≤ t < T.
  var lo = vec4<u32>(0u);
  if (p.causal != 0u) { lo = sa4; }
  for (var t0 = max(lo.x, p.lo); t0 < min(p.t, p.hi); t0 += 4u) {
    let t1 = min(t0 + 1u, last);
    let t2 = min(t0 + 2u, last);
    let t3 = min(t0 + 3u, last);
    let q0 = qb + t0 * c3;
    let q1 = qb + t1 * c3;
    let q2 = qb + t2 * c3;
    let q3 = qb + t3 * c3;
    let o0 = ob + t0 * p.c;
    let o1 = ob + t1 * p.c;
    let o2 = ob + t2 * p.c;
    let o3 = ob + t3 * p.c;
    // s<r>, e<r>: scores and dP of key r against queries t0 … t0+3.
    var sa = vec4<f32>(0.0);
    var sb = vec4<f32>(0.0);
    var sc = vec4<f32>(0.0);
    var sd = vec4<f32>(0.0);
    var ea = vec4<f32>(0.0);
    var eb = vec4<f32>(0.0);
    var ec = vec4<f32>(0.0);
    var ed = vec4<f32>(0.0);
    for (var j = 0u; j < p.hs4; j++) {
      let x0 = ld_qkv(q0, j);
      let x1 = ld_qkv(q1, j);
      let x2 = ld_qkv(q2, j);
      let x3 = ld_qkv(q3, j);
      let y0 = ld_dy(o0, j);
      let y1 = ld_dy(o1, j);
      let y2 = ld_dy(o2, j);
      let y3 = ld_dy(o3, j);
      var w = k0[j];
      sa += vec4<f32>(dot(w, x0), dot(w, x1), dot(w, x2), dot(w, x3));
      w = k1[j];
      sb += vec4<f32>(dot(w, x0), dot(w, x1), dot(w, x2), dot(w, x3));
      w = k2[j];
      sc += vec4<f32>(dot(w, x0), dot(w, x1), dot(w, x2), dot(w, x3));
      w = k3[j];
      sd += vec4<f32>(dot(w, x0), dot(w, x1), dot(w, x2), dot(w, x3));
      w = v0[j];
      ea += vec4<f32>(dot(w, y0), dot(w, y1), dot(w, y2), dot(w, y3));
      w = v1[j];
      eb += vec4<f32>(dot(w, y0), dot(w, y1), dot(w, y2), dot(w, y3));
      w = v2[j];
      ec += vec4<f32>(dot(w, y0), dot(w, y1), dot(w, y2), dot(w, y3));
      w = v3[j];
      ed += vec4<f32>(dot(w, y0), dot(w, y1), dot(w, y2), dot(w, y3));
    }
    let lv = vec4<f32>(lse[lb + t0], lse[lb + t1], lse[lb + t2], lse[lb + t3]);
    let dv4 = vec4<f32>(dd[lb + t0], dd[lb + t1], dd[lb + t2], dd[lb + t3]);
    let pa = exp(mask4_range(sa, t0, lo.x, p.t) - lv);
    let pb = exp(mask4_range(sb, t0, lo.y, p.t) - lv);
    let pc = exp(mask4_range(sc, t0, lo.z, p.t) - lv);
    let pd = exp(mask4_range(sd, t0, lo.w, p.t) - lv);
    let za = pa * (ea - dv4);
    let zb = pb * (eb - dv4);
    let zc = pc * (ec - dv4);
    let zd = pd * (ed - dv4);
    for (var j = 0u; j < p.hs4; j++) {
      let x0 = ld_qkv(q0, j);
      let x1 = ld_qkv(q1, j);
      let x2 = ld_qkv(q2, j);
      let x3 = ld_qkv(q3, j);
      let y0 = ld_dy(o0, j);
      let y1 = ld_dy(o1, j);
      let y2 = ld_dy(o2, j);
      let y3 = ld_dy(o3, j);
      dv0[j] = fma(vec4<f32>(pa.x), y0, fma(vec4<f32>(pa.y), y1, fma(vec4<f32>(pa.z), y2, fma(vec4<f32>(pa.w), y3, dv0[j]))));
      dv1[j] = fma(vec4<f32>(pb.x), y0, fma(vec4<f32>(pb.y), y1, fma(vec4<f32>(pb.z), y2, fma(vec4<f32>(pb.w), y3, dv1[j]))));
      dv2[j] = fma(vec4<f32>(pc.x), y0, fma(vec4<f32>(pc.y), y1, fma(vec4<f32>(pc.z), y2, fma(vec4<f32>(pc.w), y3, dv2[j]))));
      dv3[j] = fma(vec4<f32>(pd.x), y0, fma(vec4<f32>(pd.y), y1, fma(vec4<f32>(pd.z), y2, fma(vec4<f32>(pd.w), y3, dv3[j]))));
      dk0[j] = fma(vec4<f32>(za.x), x0, fma(vec4<f32>(za.y), x1, fma(vec4<f32>(za.z), x2, fma(vec4<f32>(za.w), x3, dk0[j]))));
      dk1[j] = fma(vec4<f32>(zb.x), x0, fma(vec4<f32>(zb.y), x1, fma(vec4<f32>(zb.z), x2, fma(vec4<f32>(zb.w), x3, dk1[j]))));
      dk2[j] = fma(vec4<f32>(zc.x), x0, fma(vec4<f32>(zc.y), x1, fma(vec4<f32>(zc.z), x2, fma(vec4<f32>(zc.w), x3, dk2[j]))));
      dk3[j] = fma(vec4<f32>(zd.x), x0, fma(vec4<f32>(zd.y), x1, fma(vec4<f32>(zd.z), x2, fma(vec4<f32>(zd.w), x3, dk3[j]))));
    }
  }
  // Keys past T (clamped duplicates of the last one) are not stored.
  for (var j = 0u; j < p.hs4; j++) {
    st_out(kb + s0 * c3, j, dk0[j] * p.scale, true);
    st_out(vb + s0 * c3, j, dv0[j], true);
    if (s0 + 1u < p.t) {
      st_out(kb + (s0 + 1u) * c3, j, dk1[j] * p.scale, true);
      st_out(vb + (s0 + 1u) * c3, j, dv1[j], true);
    }
    if (s0 + 2u < p.t) {
      st_out(kb + (s0 + 2u) * c3, j, dk2[j] * p.scale, true);
      st_out(vb + (s0 + 2u) * c3, j, dv2[j], true);
    }
    if (s0 + 3u < p.t) {
      st_out(kb + (s0 + 3u) * c3, j, dk3[j] * p.scale, true);
      st_out(vb + (s0 + 3u) * c3, j, dv3[j], true);
    }
  }
}
