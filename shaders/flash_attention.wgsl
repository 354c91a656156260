// FlashAttention-2 (Dao 2023, arXiv 2307.08691), forward and backward, without a T×T buffer.
//
//   forward, per query row: S = scale·q Kᵀ (masked keys: a large finite negative, not −∞),
//     m′ = max(m, rowmax S); P = exp(S − m′); ℓ = e^{m−m′}ℓ + rowsum P; O = e^{m−m′}O + P V;
//     finally O /= ℓ and L = m + log ℓ is saved for backward.
//   backward (three entry points, three dispatches):
//     `dsum`: D = rowsum(dO ∘ O);
//     `dq`:   per query row, recompute P = exp(scale·qKᵀ − L), dP = dO Vᵀ, dS = P ∘ (dP − D),
//             dQ += scale·dS K;
//     `dkv`:  per key row, over the queries that see it, dV += Pᵀ dO, dK += scale·dSᵀ Q.
//
// This is the barrier-free variant: every invocation owns four consecutive rows of one
// (b, h) (queries for `fwd` and `dq`, keys for `dkv`; `dsum` one query row), keeps them and
// their accumulators in private arrays (HS4 vec4s each) and streams the other side's rows
// straight from storage, four at a time, with the online softmax: each step is a 4×4 block of
// scores, so every streamed load feeds four rows (3× faster on lavapipe than one row per
// invocation). No workgroup memory and no barriers: on CPU WebGPU (lavapipe, SwiftShader)
// barriers cost far more than the caches they would replace. Rows past T are computed on a
// clamped duplicate and never stored; streamed rows past the end (or masked) get score NEG.
//
// Loop bounds over the head channels come from the uniform (`p.hs4` = HS4), not the constant:
// with constant trip counts lavapipe's LLVM unrolls them over every private array and the
// first (uncached) compile took 2× longer with no faster kernel.
//
// Each invocation runs about ceil(n/4)·(2·HS4 + 1) + 3·HS4 loop iterations for n streamed
// rows; lavapipe silently stops an invocation after 65 535 loop iterations in total (measured:
// T = 4000 at hs = 128 returned a y that had stopped near key 3912), so the TS side refuses
// sequences over its budget on CPU adapters.
//
// Layouts: qkv (B, T, 3C) with q, k, v of token (b, t) at row (b·T + t)·3C + {0, C, 2C}, head h
// at channels h·HS …; y, dy (B, T, C); lse, D (B, nh, T), row index r = (b·nh + h)·T + t.
//
// Bindings (holes where an entry point does not use one):
//   0 qkv   (read)        fwd, dq, dkv
//   1 dy    (read)        dsum, dq, dkv
//   2 yin   (read)        dsum: O
//   3 lse   (read)        dq, dkv
//   4 dd    (read)        dq, dkv: D
//   5 out   (read_write)  fwd: y    dsum: D    dq, dkv: dqkv (accumulated)
//   6 lseo  (read_write)  fwd: lse (the running max m between chunks)
//   7 lsum  (read_write)  fwd: the running sum ℓ between chunks
//   8 p     (uniform)

struct Params {
  b: u32, t: u32, c: u32, nh: u32,
  rows: u32, causal: u32, scale: f32, hs4: u32,
  lo: u32, hi: u32, first: u32, final_: u32,  // streamed rows lo … hi−1 this dispatch (multiples of 4)
}

// Head size, rewritten by the TS side (any 1 … 128). HS4 vec4s hold one head row.
const HS: u32 = 64u;
const HS4: u32 = (HS + 3u) / 4u;
// Invocations per workgroup (rows per workgroup).
const WG: u32 = 64u;
// Score of a masked (or padding) entry: exp(NEG − anything finite) is exactly 0.
const NEG: f32 = -1.0e30;

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read> yin: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> dd: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> lseo: array<f32>;
@group(0) @binding(7) var<storage, read_write> lsum: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;

fn row_index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG;
}

// Channels 4j … 4j+3 of the head row starting at `base`; with a head size that is no multiple
// of 4 the channels past HS read as 0 (the loads stay inside the buffer or are discarded).
fn ld_qkv(base: u32, j: u32) -> vec4<f32> {
  let i = base + 4u * j;
  if (HS % 4u == 0u) {
    return vec4<f32>(qkv[i], qkv[i + 1u], qkv[i + 2u], qkv[i + 3u]);
  }
  let n = HS - 4u * j;
  return vec4<f32>(qkv[i], select(0.0, qkv[i + 1u], n > 1u), select(0.0, qkv[i + 2u], n > 2u), select(0.0, qkv[i + 3u], n > 3u));
}

fn ld_dy(base: u32, j: u32) -> vec4<f32> {
  let i = base + 4u * j;
  if (HS % 4u == 0u) {
    return vec4<f32>(dy[i], dy[i + 1u], dy[i + 2u], dy[i + 3u]);
  }
  let n = HS - 4u * j;
  return vec4<f32>(dy[i], select(0.0, dy[i + 1u], n > 1u), select(0.0, dy[i + 2u], n > 2u), select(0.0, dy[i + 3u], n > 3u));
}

fn ld_y(base: u32, j: u32) -> vec4<f32> {
  let i = base + 4u * j;
  if (HS % 4u == 0u) {
    return vec4<f32>(yin[i], yin[i + 1u], yin[i + 2u], yin[i + 3u]);
  }
  let n = HS - 4u * j;
  return vec4<f32>(yin[i], select(0.0, yin[i + 1u], n > 1u), select(0.0, yin[i + 2u], n > 2u), select(0.0, yin[i + 3u], n > 3u));
}

fn ld_out(base: u32, j: u32) -> vec4<f32> {
  let i = base + 4u * j;
  if (HS % 4u == 0u) {
    return vec4<f32>(out[i], out[i + 1u], out[i + 2u], out[i + 3u]);
  }
  let n = HS - 4u * j;
  return vec4<f32>(out[i], select(0.0, out[i + 1u], n > 1u), select(0.0, out[i + 2u], n > 2u), select(0.0, out[i + 3u], n > 3u));
}

// out[base + 4j + c] = v[c] (or += when `add`), for the channels that exist.
fn st_out(base: u32, j: u32, v: vec4<f32>, add: bool) {
  let i = base + 4u * j;
  let n = HS - 4u * j;
  var w = v;
  if (add) {
    w.x += out[i];
    if (n > 1u) { w.y += out[i + 1u]; }
    if (n > 2u) { w.z += out[i + 2u]; }
    if (n > 3u) { w.w += out[i + 3u]; }
  }
  out[i] = w.x;
  if (n > 1u) { out[i + 1u] = w.y; }
  if (n > 2u) { out[i + 2u] = w.z; }
  if (n > 3u) { out[i + 3u] = w.w; }
}

// Masks lanes whose row index first + lane is ≥ n.
fn mask4(s: vec4<f32>, first: u32, n: u32) -> vec4<f32> {
  return select(s, vec4<f32>(NEG), vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(n));
}

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
