// FlashAttention-2 (Dao 2023, arXiv 2307.08691) on one (query block, key/value block) pair,
// the unit of ring attention (Liu et al., arXiv 2310.01889) and its zig-zag variant: queries
// and keys come from separate tensors with their own global positions, causal masking keeps
// key position ≤ query position, and the forward folds the block into a running (O, L).
//
//   `fwd`  per query row: online softmax over the visible keys of the block, resuming from the
//          normalised O and L = logsumexp already in out / lseo when p.acc = 1 (m = L, ℓ = 1,
//          o = O continue the same recurrence, so folding blocks one after another equals the
//          merge O = Σ e^{L_i − L} O_i, L = log Σ e^{L_i}); rows that see no key keep O and get
//          L = NEG when p.acc = 0.
//   `dsum` D = rowsum(dO ∘ O) of the merged output, one invocation per row.
//   `bdq`  per query row: P = exp(scale·qKᵀ − L) with the global L, dS = P ∘ (dO Vᵀ − D),
//          dQ += scale·dS K.
//   `bdkv` per key row, over the queries that see it: dV += Pᵀ dO, dK += scale·dSᵀ Q.
//
// One row per invocation, the other side streamed from storage (no workgroup memory: the
// barrier-free design of flash_attention.wgsl, which CPU adapters need and GPUs tolerate at
// the small blocks of context parallelism). Streamed rows are limited to [p.lo, p.hi) so the
// TS side can split long blocks over dispatches within lavapipe's 65 535-iteration limit.
//
// Layouts (row = token of one batch element):
//   q side  (B, qrows, qw): head h of query row i at (b·qrows + qfirst + i)·qw + qo + h·HS
//   kv side (B, krows, kw): key at (b·krows + kfirst + j)·kw + ko + h·HS, value + C
//   O, dO   (B, qrows, C); L, D (B, nh, qrows) at (b·nh + h)·qrows + qfirst + i
//   out     fwd: O    dsum: D    bdq: dQ (B, qrows, ow) at oo    bdkv: dK (B, krows, ow) at oo, dV + C
//
// Bindings (each entry point binds only what it uses; holes are left out by the TS side):
//   0 qsrc (read)   fwd, bdq, bdkv: queries    dsum: O
//   1 kvsrc (read)  fwd, bdq, bdkv
//   2 dy (read)     dsum, bdq, bdkv
//   3 lse (read)    bdq, bdkv
//   4 dd (read)     bdq, bdkv
//   5 out (rw)
//   6 lseo (rw)     fwd
//   7 p (uniform)

struct Params {
  b: u32, nh: u32, c: u32, hs4: u32,
  scale: f32, causal: u32, acc: u32, lo: u32,
  hi: u32, qrows: u32, qfirst: u32, qn: u32,
  qpos: u32, krows: u32, kfirst: u32, kn: u32,
  kpos: u32, qw: u32, qo: u32, kw: u32,
  ko: u32, ow: u32, oo: u32, pad: u32,
}

// Head size, rewritten by the TS side (1 … 128).
const HS: u32 = 64u;
const HS4: u32 = (HS + 3u) / 4u;
const WG: u32 = 64u;
// L of a row that saw no key: exp(NEG − finite) is exactly 0.
const NEG: f32 = -1.0e30;

@group(0) @binding(0) var<storage, read> qsrc: array<f32>;
@group(0) @binding(1) var<storage, read> kvsrc: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> dd: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> lseo: array<f32>;
@group(0) @binding(7) var<uniform> p: Params;

// Lanes of channels 4j … 4j+3 that exist (HS need not be a multiple of 4).
fn lanes(j: u32) -> u32 {
  return min(4u, HS - 4u * j);
}

fn ld_q(i: u32, j: u32) -> vec4<f32> {
  let n = lanes(j);
  let a = i + 4u * j;
  return vec4<f32>(qsrc[a], select(0.0, qsrc[a + 1u], n > 1u), select(0.0, qsrc[a + 2u], n > 2u), select(0.0, qsrc[a + 3u], n > 3u));
}

fn ld_kv(i: u32, j: u32) -> vec4<f32> {
  let n = lanes(j);
  let a = i + 4u * j;
  return vec4<f32>(kvsrc[a], select(0.0, kvsrc[a + 1u], n > 1u), select(0.0, kvsrc[a + 2u], n > 2u), select(0.0, kvsrc[a + 3u], n > 3u));
}

fn ld_dy(i: u32, j: u32) -> vec4<f32> {
  let n = lanes(j);
  let a = i + 4u * j;
  return vec4<f32>(dy[a], select(0.0, dy[a + 1u], n > 1u), select(0.0, dy[a + 2u], n > 2u), select(0.0, dy[a + 3u], n > 3u));
}

fn ld_out(i: u32, j: u32) -> vec4<f32> {
  let n = lanes(j);
  let a = i + 4u * j;
  return vec4<f32>(out[a], select(0.0, out[a + 1u], n > 1u), select(0.0, out[a + 2u], n > 2u), select(0.0, out[a + 3u], n > 3u));
}

// out[i + 4j …] = v (or += when `add`) for the channels that exist.
fn st_out(i: u32, j: u32, v: vec4<f32>, add: bool) {
  let n = lanes(j);
  let a = i + 4u * j;
  var w = v;
  if (add) { w += ld_out(i, j); }
  out[a] = w.x;
  if (n > 1u) { out[a + 1u] = w.y; }
  if (n > 2u) { out[a + 2u] = w.z; }
  if (n > 3u) { out[a + 3u] = w.w; }
}

fn item_of(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG;
}

// Keys j < key_end(i) of the block are visible to query row i (key pos ≤ query pos).
fn key_end(i: u32) -> u32 {
  if (p.causal == 0u) { return p.kn; }
  let e = i32(p.qpos + i) - i32(p.kpos) + 1;
  return u32(clamp(e, 0, i32(p.kn)));
}

// Query rows i ≥ query_begin(j) of the block see key row j.
fn query_begin(j: u32) -> u32 {
  if (p.causal == 0u) { return 0u; }
  let s = i32(p.kpos + j) - i32(p.qpos);
  return u32(clamp(s, 0, i32(p.qn)));
}

@compute @workgroup_size(WG)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let item = item_of(gid, groups);
  if (item >= p.b * p.nh * p.qn) { return; }
  let i = item % p.qn;
  let bh = item / p.qn;
  let h = bh % p.nh;
  let bi = bh / p.nh;
  let qa = (bi * p.qrows + p.qfirst + i) * p.qw + p.qo + h * HS;
  let oa = (bi * p.qrows + p.qfirst + i) * p.c + h * HS;
  let la = bh * p.qrows + p.qfirst + i;
  let kb = bi * p.krows + p.kfirst;
  var q: array<vec4<f32>, HS4>;
  var o: array<vec4<f32>, HS4>;
  var m = NEG;
  var l = 0.0;
  if (p.acc != 0u) {
    m = lseo[la];
    l = select(0.0, 1.0, m > 0.5 * NEG);
  }
  for (var j = 0u; j < p.hs4; j++) {
    q[j] = ld_q(qa, j) * p.scale;
    o[j] = select(vec4<f32>(0.0), ld_out(oa, j), p.acc != 0u);
  }
  for (var s = p.lo; s < min(p.hi, key_end(i)); s++) {
    let ka = (kb + s) * p.kw + p.ko + h * HS;
    var d = vec4<f32>(0.0);
    for (var j = 0u; j < p.hs4; j++) { d = fma(q[j], ld_kv(ka, j), d); }
    let sc = (d.x + d.y) + (d.z + d.w);
    let mn = max(m, sc);
    let alpha = exp(m - mn);
    let pr = exp(sc - mn);
    l = l * alpha + pr;
    for (var j = 0u; j < p.hs4; j++) { o[j] = fma(vec4<f32>(pr), ld_kv(ka + p.c, j), o[j] * alpha); }
    m = mn;
  }
  if (l > 0.0) {
    for (var j = 0u; j < p.hs4; j++) { st_out(oa, j, o[j] / l, false); }
    lseo[la] = m + log(l);
  } else {
    for (var j = 0u; j < p.hs4; j++) { st_out(oa, j, vec4<f32>(0.0), false); }
    lseo[la] = NEG;
  }
}

@compute @workgroup_size(WG)
fn dsum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let item = item_of(gid, groups);
  if (item >= p.b * p.nh * p.qn) { return; }
  let i = item % p.qn;
  let bh = item / p.qn;
  let h = bh % p.nh;
  let oa = ((bh / p.nh) * p.qrows + p.qfirst + i) * p.c + h * HS;
  var acc = vec4<f32>(0.0);
  for (var j = 0u; j < p.hs4; j++) { acc = fma(ld_dy(oa, j), ld_q(oa, j), acc); }
  out[bh * p.qrows + p.qfirst + i] = (acc.x + acc.y) + (acc.z + acc.w);
}

@compute @workgroup_size(WG)
fn bdq(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let item = item_of(gid, groups);
  if (item >= p.b * p.nh * p.qn) { return; }
  let i = item % p.qn;
  let bh = item / p.qn;
  let h = bh % p.nh;
  let bi = bh / p.nh;
  let row = bi * p.qrows + p.qfirst + i;
  let qa = row * p.qw + p.qo + h * HS;
  let ga = row * p.c + h * HS;
  let la = bh * p.qrows + p.qfirst + i;
  let kb = bi * p.krows + p.kfirst;
  let lr = lse[la];
  let dr = dd[la];
  var q: array<vec4<f32>, HS4>;
  var g: array<vec4<f32>, HS4>;
  var a: array<vec4<f32>, HS4>;
  for (var j = 0u; j < p.hs4; j++) {
    q[j] = ld_q(qa, j) * p.scale;
    g[j] = ld_dy(ga, j);
    a[j] = vec4<f32>(0.0);
  }
  for (var s = p.lo; s < min(p.hi, key_end(i)); s++) {
    let ka = (kb + s) * p.kw + p.ko + h * HS;
    var sd = vec4<f32>(0.0);
    var dp = vec4<f32>(0.0);
    for (var j = 0u; j < p.hs4; j++) {
      sd = fma(q[j], ld_kv(ka, j), sd);
      dp = fma(g[j], ld_kv(ka + p.c, j), dp);
    }
    let pr = exp((sd.x + sd.y) + (sd.z + sd.w) - lr);
    let ds = pr * ((dp.x + dp.y) + (dp.z + dp.w) - dr);
    for (var j = 0u; j < p.hs4; j++) { a[j] = fma(vec4<f32>(ds), ld_kv(ka, j), a[j]); }
  }
  let da = row * p.ow + p.oo + h * HS;
  for (var j = 0u; j < p.hs4; j++) { st_out(da, j, a[j] * p.scale, true); }
}

@compute @workgroup_size(WG)
fn bdkv(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let item = item_of(gid, groups);
  if (item >= p.b * p.nh * p.kn) { return; }
  let s = item % p.kn;
  let bh = item / p.kn;
  let h = bh % p.nh;
  let bi = bh / p.nh;
  let krow = bi * p.krows + p.kfirst + s;
  let ka = krow * p.kw + p.ko + h * HS;
  let qb = bi * p.qrows + p.qfirst;
  let lb = bh * p.qrows + p.qfirst;
  var k: array<vec4<f32>, HS4>;
  var v: array<vec4<f32>, HS4>;
  var dk: array<vec4<f32>, HS4>;
  var dv: array<vec4<f32>, HS4>;
  for (var j = 0u; j < p.hs4; j++) {
    k[j] = ld_kv(ka, j) * p.scale;
    v[j] = ld_kv(ka + p.c, j);
    dk[j] = vec4<f32>(0.0);
    dv[j] = vec4<f32>(0.0);
  }
  for (var i = max(p.lo, query_begin(s)); i < min(p.hi, p.qn); i++) {
    let qa = (qb + i) * p.qw + p.qo + h * HS;
    let ga = (qb + i) * p.c + h * HS;
    var sd = vec4<f32>(0.0);
    var dp = vec4<f32>(0.0);
    for (var j = 0u; j < p.hs4; j++) {
      sd = fma(k[j], ld_q(qa, j), sd);
      dp = fma(v[j], ld_dy(ga, j), dp);
    }
    let pr = exp((sd.x + sd.y) + (sd.z + sd.w) - lse[lb + i]);
    let ds = pr * ((dp.x + dp.y) + (dp.z + dp.w) - dd[lb + i]);
    for (var j = 0u; j < p.hs4; j++) {
      dv[j] = fma(vec4<f32>(pr), ld_dy(ga, j), dv[j]);
      dk[j] = fma(vec4<f32>(ds), ld_q(qa, j), dk[j]);
    }
  }
  let da = krow * p.ow + p.oo + h * HS;
  for (var j = 0u; j < p.hs4; j++) {
    st_out(da, j, dk[j] * p.scale, true);
    st_out(da + p.c, j, dv[j], true);
  }
}
