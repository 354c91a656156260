// Chunked scalar-decay linear attention, backward (fla-org/flash-linear-attention
// `fla/ops/simple_gla`, docs/design.md#chunked-linear-attention-with-a-scalar-decay). The state gradient dh_n = ∂L/∂h_n
// comes from `la_local` (mode 1) + `la_scan` (mode 1) in linear_attention.wgsl:
//   dh_n = Σ_{t ∈ n} scale·e^{b_t} q_tᵀ dout_t + e^{b_L} dh_{n+1},  dh_N = 0.
// Then, with b the in-chunk cumsum of g, end = last row of the chunk:
//   `lb_dq` per (b, h, t): dq_t = scale·(e^{b_t} h_n dout_tᵀ + Σ_{s ≤ t} e^{b_t − b_s} (v_s·dout_t) k_s)
//   `lb_dk` per (b, h, s): dk_s = scale·Σ_{t ≥ s} e^{b_t − b_s} (dout_t·v_s) q_t + e^{b_L − b_s} dh_{n+1} v_s
//   `lb_dv` per (b, h, s): dv_s = scale·Σ_{t ≥ s} e^{b_t − b_s} (q_t·k_s) dout_t + e^{b_L − b_s} dh_{n+1}ᵀ k_s
//   `lb_dg` per (b, h): dg_r = Σ_{t ≥ r} (q_t·dq_t − k_t·dk_t), a reverse cumsum over the whole
//           sequence. Why: L depends on g only through B_t = Σ_{r ≤ t} g_r (global cumsum), via
//           factors e^{B_t} on q_t and e^{−B_s} on k_s, so ∂L/∂B_t = q_t·∂L/∂q_t − k_t·∂L/∂k_t
//           (the s = t term appears in both and cancels), and ∂L/∂g_r = Σ_{t ≥ r} ∂L/∂B_t.
// dq and dk write their q·dq and k·dk (fresh, before accumulation) to scr for `lb_dg`.
//
// Each invocation owns one row in a private array of vec4s and streams the rest four channels
// per trip, loads past a row's end masked to 0, as in linear_attention.wgsl. Loop trips per
// invocation (K4 = ⌈K/4⌉, V4 = ⌈V/4⌉): dq, dk, dv ≤ K4·V4 + L·(K4 + V4 + 1) + L + K4 + V4
// (≈ 3.2k at K = V = 128); dg 1 per row (the TS side splits T over dispatches, carrying the
// running sum in scr).
//
// Layouts: q, k (B, T, H·K); v, dout (B, T, H·V); g, dg (B, T, H); st (B, H, N, K, V);
// scr: [q·dq (B, H, T) | k·dk (B, H, T) | dg carry (B, H)].

const LC: u32 = 32u;
const MAXD4: u32 = 32u;
const WG: u32 = 64u;

struct Params {
  b: u32,
  t: u32,
  h: u32,
  dk: u32,
  dv: u32,
  nc: u32,
  lo: u32,
  hi: u32,
  scale: f32,
  first: u32,
  dk4: u32,
  dv4: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> st: array<f32>;         // dq: states h_n; dk, dv: dh_n
@group(0) @binding(6) var<storage, read_write> grad: array<f32>; // dq, dk, dv or dg (accumulated)
@group(0) @binding(7) var<storage, read_write> scr: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;

fn item_index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG;
}

fn gat(b: u32, t: u32, h: u32) -> f32 {
  return g[(b * p.t + t) * p.h + h];
}

fn row(b: u32, t: u32, h: u32, d: u32) -> u32 {
  return ((b * p.t + t) * p.h + h) * d;
}

fn sbase(b: u32, h: u32, n: u32) -> u32 {
  return ((b * p.h + h) * p.nc + n) * p.dk * p.dv;
}

// Elements i … i+3 of a row of length n starting at `base`, lanes past its end zeroed.
fn lanes(i: u32, n: u32) -> vec4<bool> {
  return vec4<u32>(i, i + 1u, i + 2u, i + 3u) < vec4<u32>(n);
}
fn idx4(base: u32, i: u32, n: u32) -> vec4<u32> {
  return vec4<u32>(base) + min(vec4<u32>(i, i + 1u, i + 2u, i + 3u), vec4<u32>(n - 1u));
}
fn ld_q(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(q[x.x], q[x.y], q[x.z], q[x.w]), lanes(i, n));
}
fn ld_k(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(k[x.x], k[x.y], k[x.z], k[x.w]), lanes(i, n));
}
fn ld_v(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(v[x.x], v[x.y], v[x.z], v[x.w]), lanes(i, n));
}
fn ld_do(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(dout[x.x], dout[x.y], dout[x.z], dout[x.w]), lanes(i, n));
}
fn ld_st(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(st[x.x], st[x.y], st[x.z], st[x.w]), lanes(i, n));
}
// grad[base + i …] += x, lanes past n skipped.
fn add_grad(base: u32, i: u32, n: u32, x: vec4<f32>) {
  grad[base + i] += x.x;
  if (i + 1u < n) { grad[base + i + 1u] += x.y; }
  if (i + 2u < n) { grad[base + i + 2u] += x.z; }
  if (i + 3u < n) { grad[base + i + 3u] += x.w; }
}

// acc[i4] = Σ_j M[i, j] x[j] for the four rows i of each group: M (K, V) at `sb`, x held in
// xr (V4 vec4s). Rows past K are clamped to row K − 1 and their lanes dropped by the caller.
fn rows_dot(sb: u32, i: u32, xr: ptr<function, array<vec4<f32>, MAXD4>>) -> vec4<f32> {
  let last = p.dk - 1u;
  let r0 = sb + i * p.dv;
  let r1 = sb + min(i + 1u, last) * p.dv;
  let r2 = sb + min(i + 2u, last) * p.dv;
  let r3 = sb + min(i + 3u, last) * p.dv;
  var a = vec4<f32>(0.0);
  for (var j4 = 0u; j4 < p.dv4; j4++) {
    let j = 4u * j4;
    let x = (*xr)[j4];
    a += vec4<f32>(dot(ld_st(r0, j, p.dv), x), dot(ld_st(r1, j, p.dv), x), dot(ld_st(r2, j, p.dv), x), dot(ld_st(r3, j, p.dv), x));
  }
  return a;
}

@compute @workgroup_size(WG)
fn lb_dq(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let id = item_index(gid, groups);
  if (id >= p.b * p.h * p.t) { return; }
  let t = id % p.t;
  let bh = id / p.t;
  let h = bh % p.h;
  let b = bh / p.h;
  let n = t / LC;
  let start = n * LC;
  var bt = 0.0;
  for (var s = start; s <= t; s++) { bt += gat(b, s, h); }
  let db = row(b, t, h, p.dv);
  var dr: array<vec4<f32>, MAXD4>;
  for (var j4 = 0u; j4 < p.dv4; j4++) { dr[j4] = ld_do(db, 4u * j4, p.dv); }
  var acc: array<vec4<f32>, MAXD4>;
  for (var i4 = 0u; i4 < p.dk4; i4++) { acc[i4] = vec4<f32>(0.0); }
  if (n > 0u) {
    // Inter-chunk: e^{b_t} h_n dout_tᵀ.
    let et = exp(bt);
    let sb = sbase(b, h, n);
    for (var i4 = 0u; i4 < p.dk4; i4++) { acc[i4] = et * rows_dot(sb, 4u * i4, &dr); }
  }
  // Intra-chunk: Σ_{s ≤ t} e^{b_t − b_s} (v_s·dout_t) k_s.
  var bs = 0.0;
  for (var s = start; s <= t; s++) {
    bs += gat(b, s, h);
    let vb = row(b, s, h, p.dv);
    var vd = 0.0;
    for (var j4 = 0u; j4 < p.dv4; j4++) { vd += dot(ld_v(vb, 4u * j4, p.dv), dr[j4]); }
    let c = vd * exp(bt - bs);
    let kb = row(b, s, h, p.dk);
    for (var i4 = 0u; i4 < p.dk4; i4++) { acc[i4] += c * ld_k(kb, 4u * i4, p.dk); }
  }
  let qb = row(b, t, h, p.dk);
  var qdq = 0.0;
  for (var i4 = 0u; i4 < p.dk4; i4++) {
    let x = p.scale * acc[i4];
    add_grad(qb, 4u * i4, p.dk, x);
    qdq += dot(ld_q(qb, 4u * i4, p.dk), x);
  }
  scr[bh * p.t + t] = qdq;
}

// b_s (cumsum through s) and b_L (through the chunk's last row) of the chunk holding s.
fn cums(b: u32, h: u32, s: u32) -> vec2<f32> {
  let start = (s / LC) * LC;
  let end = min(start + LC, p.t);
  var bs = 0.0;
  var bl = 0.0;
  for (var r = start; r < end; r++) {
    bl += gat(b, r, h);
    if (r == s) { bs = bl; }
  }
  return vec2<f32>(bs, bl);
}

@compute @workgroup_size(WG)
fn lb_dk(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let id = item_index(gid, groups);
  if (id >= p.b * p.h * p.t) { return; }
  let s = id % p.t;
  let bh = id / p.t;
  let h = bh % p.h;
  let b = bh / p.h;
  let n = s / LC;
  let end = min(n * LC + LC, p.t);
  let c2 = cums(b, h, s);
  let vb = row(b, s, h, p.dv);
  var vr: array<vec4<f32>, MAXD4>;
  for (var j4 = 0u; j4 < p.dv4; j4++) { vr[j4] = ld_v(vb, 4u * j4, p.dv); }
  var acc: array<vec4<f32>, MAXD4>;
  for (var i4 = 0u; i4 < p.dk4; i4++) { acc[i4] = vec4<f32>(0.0); }
  if (n + 1u < p.nc) {
    // From later chunks: e^{b_L − b_s} dh_{n+1} v_sᵀ.
    let cl = exp(c2.y - c2.x);
    let sb = sbase(b, h, n + 1u);
    for (var i4 = 0u; i4 < p.dk4; i4++) { acc[i4] = cl * rows_dot(sb, 4u * i4, &vr); }
  }
  // Intra-chunk: scale·Σ_{t ≥ s} e^{b_t − b_s} (dout_t·v_s) q_t.
  var bt = c2.x;
  for (var t = s; t < end; t++) {
    if (t > s) { bt += gat(b, t, h); }
    let db = row(b, t, h, p.dv);
    var dv = 0.0;
    for (var j4 = 0u; j4 < p.dv4; j4++) { dv += dot(ld_do(db, 4u * j4, p.dv), vr[j4]); }
    let c = p.scale * dv * exp(bt - c2.x);
    let qb = row(b, t, h, p.dk);
    for (var i4 = 0u; i4 < p.dk4; i4++) { acc[i4] += c * ld_q(qb, 4u * i4, p.dk); }
  }
  let kb = row(b, s, h, p.dk);
  var kdk = 0.0;
  for (var i4 = 0u; i4 < p.dk4; i4++) {
    add_grad(kb, 4u * i4, p.dk, acc[i4]);
    kdk += dot(ld_k(kb, 4u * i4, p.dk), acc[i4]);
  }
  scr[(p.b * p.h + bh) * p.t + s] = kdk;
}

@compute @workgroup_size(WG)
fn lb_dv(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let id = item_index(gid, groups);
  if (id >= p.b * p.h * p.t) { return; }
  let s = id % p.t;
  let bh = id / p.t;
  let h = bh % p.h;
  let b = bh / p.h;
  let n = s / LC;
  let end = min(n * LC + LC, p.t);
  let c2 = cums(b, h, s);
  let kb = row(b, s, h, p.dk);
  var kr: array<vec4<f32>, MAXD4>;
  for (var i4 = 0u; i4 < p.dk4; i4++) { kr[i4] = ld_k(kb, 4u * i4, p.dk); }
  var acc: array<vec4<f32>, MAXD4>;
  for (var j4 = 0u; j4 < p.dv4; j4++) { acc[j4] = vec4<f32>(0.0); }
  if (n + 1u < p.nc) {
    // From later chunks: e^{b_L − b_s} k_s dh_{n+1}, four rows of dh per trip (rows past K: weight 0).
    let sb = sbase(b, h, n + 1u);
    let cl = exp(c2.y - c2.x);
    let last = p.dk - 1u;
    for (var i4 = 0u; i4 < p.dk4; i4++) {
      let ki = cl * kr[i4];
      let i = 4u * i4;
      let r0 = sb + i * p.dv;
      let r1 = sb + min(i + 1u, last) * p.dv;
      let r2 = sb + min(i + 2u, last) * p.dv;
      let r3 = sb + min(i + 3u, last) * p.dv;
      for (var j4 = 0u; j4 < p.dv4; j4++) {
        let j = 4u * j4;
        acc[j4] += ki.x * ld_st(r0, j, p.dv) + ki.y * ld_st(r1, j, p.dv) + ki.z * ld_st(r2, j, p.dv) + ki.w * ld_st(r3, j, p.dv);
      }
    }
  }
  // Intra-chunk: scale·Σ_{t ≥ s} e^{b_t − b_s} (q_t·k_s) dout_t.
  var bt = c2.x;
  for (var t = s; t < end; t++) {
    if (t > s) { bt += gat(b, t, h); }
    let qb = row(b, t, h, p.dk);
    var qk = 0.0;
    for (var i4 = 0u; i4 < p.dk4; i4++) { qk += dot(ld_q(qb, 4u * i4, p.dk), kr[i4]); }
    let c = p.scale * qk * exp(bt - c2.x);
    let db = row(b, t, h, p.dv);
    for (var j4 = 0u; j4 < p.dv4; j4++) { acc[j4] += c * ld_do(db, 4u * j4, p.dv); }
  }
  let vb = row(b, s, h, p.dv);
  for (var j4 = 0u; j4 < p.dv4; j4++) { add_grad(vb, 4u * j4, p.dv, acc[j4]); }
}

@compute @workgroup_size(WG)
fn lb_dg(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let bh = item_index(gid, groups);
  let nbh = p.b * p.h;
  if (bh >= nbh) { return; }
  let h = bh % p.h;
  let b = bh / p.h;
  // Rows [lo, hi), descending; the running sum of the rows above hi waits in scr.
  let ci = 2u * nbh * p.t + bh;
  var c = 0.0;
  if (p.first == 0u) { c = scr[ci]; }
  for (var t = p.hi; t > p.lo; t--) {
    let r = t - 1u;
    c += scr[bh * p.t + r] - scr[(nbh + bh) * p.t + r];
    grad[(b * p.t + r) * p.h + h] += c;
  }
  scr[ci] = c;
}
