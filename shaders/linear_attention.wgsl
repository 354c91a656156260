// Chunked scalar-decay linear attention ("simple GLA"; fla-org/flash-linear-attention
// `fla/ops/simple_gla`, docs/design.md#chunked-linear-attention-with-a-scalar-decay): forward entry points, plus
// `la_local` and `la_scan`, which the backward (linear_attention_bwd.wgsl) reuses for the state gradient.
//
// Per (b, h): S_t = e^{g_t} S_{t−1} + k_tᵀ v_t, o_t = scale·q_t S_t. Per chunk n of L = LC rows
// (b_t = in-chunk cumsum of g, h_n = state entering chunk n, h_0 = 0):
//   O_n     = (Q_n ∘ e^{b}) h_n + ((Q_n K_nᵀ) ∘ M ∘ e^{b_t − b_s}) V_n      (`la_out`)
//   h_{n+1} = e^{b_L} h_n + (K_n ∘ e^{b_L − b})ᵀ V_n                        (`la_local` + `la_scan`)
// Every exponent is a difference b_t − b_s with s ≤ t (or b_L − b_s, or b_t), so it is ≤ 0 and
// strong decays underflow to 0 instead of overflowing.
//
// Barrier-free (CPU adapters pay dearly for barriers): every invocation owns a row of its result
// in a private array of ≤ 32 vec4s (or a 4×4 block in registers) and streams the rest, four
// channels per loop trip (lavapipe's cost is mostly per trip). Loads past a row's end are
// masked to 0 (K, V need not be multiples of 4). Loop bounds come from the uniform, not the
// constants, so lavapipe does not unroll them over the private arrays. K4 = ⌈K/4⌉, V4 = ⌈V/4⌉.
//   `la_local` per (b, h, n, 4×4 block): mode 0 ΔS_n = Σ_s e^{b_L − b_s} k_sᵀ v_s → slot n+1;
//              mode 1 ΔD_n = Σ_t scale·e^{b_t} q_tᵀ dout_t → slot n.  2L trips.
//   `la_scan`  per (b, h, row i): mode 0 h_n = e^{b_L(n−1)} h_{n−1} + ΔS_{n−1} in place, n ascending;
//              mode 1 dh_n = ΔD_n + e^{b_L(n)} dh_{n+1} in place, n descending.
//              L + V4 trips per chunk; the TS side splits the chunks over dispatches.
//   `la_out`   per (b, h, t): o_t.  K4·V4 + (t − start + 1)·(K4 + V4) + 2L ≤ 3.2k trips at K = V = 128.
//
// Layouts: q, k (B, T, H·K); v, o, dout (B, T, H·V); g (B, T, H); st (B, H, N, K, V).

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
  mode: u32,
  dk4: u32,
  dv4: u32,
}

@group(0) @binding(0) var<storage, read> src_a: array<f32>;     // la_local: k (mode 0) or q (mode 1)
@group(0) @binding(1) var<storage, read> src_c: array<f32>;     // la_local: v (mode 0) or dout (mode 1)
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> st: array<f32>;  // states (fwd) or dH (bwd)
@group(0) @binding(4) var<storage, read> q: array<f32>;
@group(0) @binding(5) var<storage, read> k: array<f32>;
@group(0) @binding(6) var<storage, read> v: array<f32>;
@group(0) @binding(7) var<storage, read_write> o: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;

fn item_index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG;
}

fn gat(b: u32, t: u32, h: u32) -> f32 {
  return g[(b * p.t + t) * p.h + h];
}

// Start of row (b, t, h) in a (B, T, H·D) array.
fn row(b: u32, t: u32, h: u32, d: u32) -> u32 {
  return ((b * p.t + t) * p.h + h) * d;
}

// Start of state (b, h, n) in (B, H, N, K, V).
fn sbase(b: u32, h: u32, n: u32) -> u32 {
  return ((b * p.h + h) * p.nc + n) * p.dk * p.dv;
}

// Σ g over chunk n of (b, h): b_L of that chunk.
fn chunk_sum(b: u32, h: u32, n: u32) -> f32 {
  let end = min(n * LC + LC, p.t);
  var s = 0.0;
  for (var r = n * LC; r < end; r++) { s += gat(b, r, h); }
  return s;
}

// Elements i … i+3 of a row of length n starting at `base`: indices clamped into the row,
// lanes past its end zeroed (select, so whatever the clamped read returns is dropped).
fn lanes(i: u32, n: u32) -> vec4<bool> {
  return vec4<u32>(i, i + 1u, i + 2u, i + 3u) < vec4<u32>(n);
}
fn idx4(base: u32, i: u32, n: u32) -> vec4<u32> {
  return vec4<u32>(base) + min(vec4<u32>(i, i + 1u, i + 2u, i + 3u), vec4<u32>(n - 1u));
}
fn ld_a(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(src_a[x.x], src_a[x.y], src_a[x.z], src_a[x.w]), lanes(i, n));
}
fn ld_c(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(src_c[x.x], src_c[x.y], src_c[x.z], src_c[x.w]), lanes(i, n));
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
fn ld_st(base: u32, i: u32, n: u32) -> vec4<f32> {
  let x = idx4(base, i, n);
  return select(vec4<f32>(0.0), vec4<f32>(st[x.x], st[x.y], st[x.z], st[x.w]), lanes(i, n));
}
fn put_st(base: u32, i: u32, n: u32, x: vec4<f32>) {
  st[base + i] = x.x;
  if (i + 1u < n) { st[base + i + 1u] = x.y; }
  if (i + 2u < n) { st[base + i + 2u] = x.z; }
  if (i + 3u < n) { st[base + i + 3u] = x.w; }
}

@compute @workgroup_size(WG)
fn la_local(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  // One 4×4 block (rows i…i+3, columns j…j+3) of ΔS_n or ΔD_n per invocation, in registers:
  // a private array here (K vec4s) made lavapipe's compile 10× slower.
  let id = item_index(gid, groups);
  let blocks = p.dk4 * p.dv4;
  if (id >= p.b * p.h * p.nc * blocks) { return; }
  let j = (id % p.dv4) * 4u;
  let i = ((id / p.dv4) % p.dk4) * 4u;
  let n = (id / blocks) % p.nc;
  let bh = id / (blocks * p.nc);
  let h = bh % p.h;
  let b = bh / p.h;
  let fwd = p.mode == 0u;
  // The forward's ΔS of the last chunk would feed a state nobody reads.
  if (fwd && n + 1u >= p.nc) { return; }
  let start = n * LC;
  let end = min(start + LC, p.t);
  let bl = chunk_sum(b, h, n);
  var a0 = vec4<f32>(0.0);
  var a1 = vec4<f32>(0.0);
  var a2 = vec4<f32>(0.0);
  var a3 = vec4<f32>(0.0);
  var bs = 0.0;
  for (var s = start; s < end; s++) {
    bs += gat(b, s, h);
    var coef = p.scale * exp(bs);
    if (fwd) { coef = exp(bl - bs); }
    let c = coef * ld_c(row(b, s, h, p.dv), j, p.dv);
    let a = ld_a(row(b, s, h, p.dk), i, p.dk);
    a0 += a.x * c;
    a1 += a.y * c;
    a2 += a.z * c;
    a3 += a.w * c;
  }
  var slot = n;
  if (fwd) { slot = n + 1u; }
  let sb = sbase(b, h, slot) + i * p.dv;
  put_st(sb, j, p.dv, a0);
  if (i + 1u < p.dk) { put_st(sb + p.dv, j, p.dv, a1); }
  if (i + 2u < p.dk) { put_st(sb + 2u * p.dv, j, p.dv, a2); }
  if (i + 3u < p.dk) { put_st(sb + 3u * p.dv, j, p.dv, a3); }
}

@compute @workgroup_size(WG)
fn la_scan(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let id = item_index(gid, groups);
  if (id >= p.b * p.h * p.dk) { return; }
  let i = id % p.dk;
  let bh = id / p.dk;
  let h = bh % p.h;
  let b = bh / p.h;
  // Row i of slot n starts at base + n·stride.
  let stride = p.dk * p.dv;
  let base = bh * p.nc * stride + i * p.dv;
  var carry: array<vec4<f32>, MAXD4>;
  if (p.mode == 0u) {
    // Slot n holds ΔS_{n−1} (slot 0: nothing); it becomes h_n. Chunks [lo, hi).
    for (var j4 = 0u; j4 < p.dv4; j4++) {
      carry[j4] = vec4<f32>(0.0);
      if (p.lo > 0u) { carry[j4] = ld_st(base + (p.lo - 1u) * stride, 4u * j4, p.dv); }
    }
    for (var n = p.lo; n < p.hi; n++) {
      // h_0 = 0 whatever slot 0 held (the carry is 0 there too).
      var e = 0.0;
      if (n > 0u) { e = exp(chunk_sum(b, h, n - 1u)); }
      let rb = base + n * stride;
      for (var j4 = 0u; j4 < p.dv4; j4++) {
        var val = e * carry[j4];
        if (n > 0u) { val += ld_st(rb, 4u * j4, p.dv); }
        put_st(rb, 4u * j4, p.dv, val);
        carry[j4] = val;
      }
    }
  } else {
    // Slot n holds ΔD_n; it becomes dh_n = ∂L/∂h_n. Chunks [lo, hi), descending.
    for (var j4 = 0u; j4 < p.dv4; j4++) {
      carry[j4] = vec4<f32>(0.0);
      if (p.hi < p.nc) { carry[j4] = ld_st(base + p.hi * stride, 4u * j4, p.dv); }
    }
    for (var n = p.hi; n > p.lo; n--) {
      let m = n - 1u;
      var e = 0.0;
      if (m + 1u < p.nc) { e = exp(chunk_sum(b, h, m)); }
      let rb = base + m * stride;
      for (var j4 = 0u; j4 < p.dv4; j4++) {
        let val = ld_st(rb, 4u * j4, p.dv) + e * carry[j4];
        put_st(rb, 4u * j4, p.dv, val);
        carry[j4] = val;
      }
    }
  }
}

@compute @workgroup_size(WG)
fn la_out(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
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
  let qb = row(b, t, h, p.dk);
  var qr: array<vec4<f32>, MAXD4>;
  for (var i4 = 0u; i4 < p.dk4; i4++) { qr[i4] = ld_q(qb, 4u * i4, p.dk); }
  var acc: array<vec4<f32>, MAXD4>;
  for (var j4 = 0u; j4 < p.dv4; j4++) { acc[j4] = vec4<f32>(0.0); }
  if (n > 0u) {
    // Inter-chunk: (q_t e^{b_t}) h_n, four rows of h_n per trip (rows past K: weight 0).
    let et = exp(bt);
    let sb = sbase(b, h, n);
    let last = p.dk - 1u;
    for (var i4 = 0u; i4 < p.dk4; i4++) {
      let qi = qr[i4] * et;
      let i = 4u * i4;
      let r0 = sb + i * p.dv;
      let r1 = sb + min(i + 1u, last) * p.dv;
      let r2 = sb + min(i + 2u, last) * p.dv;
      let r3 = sb + min(i + 3u, last) * p.dv;
      for (var j4 = 0u; j4 < p.dv4; j4++) {
        let j = 4u * j4;
        acc[j4] += qi.x * ld_st(r0, j, p.dv) + qi.y * ld_st(r1, j, p.dv) + qi.z * ld_st(r2, j, p.dv) + qi.w * ld_st(r3, j, p.dv);
      }
    }
  }
  // Intra-chunk: Σ_{s ≤ t} (q_t·k_s) e^{b_t − b_s} v_s.
  var bs = 0.0;
  for (var s = start; s <= t; s++) {
    bs += gat(b, s, h);
    let kb = row(b, s, h, p.dk);
    var qk = 0.0;
    for (var i4 = 0u; i4 < p.dk4; i4++) { qk += dot(qr[i4], ld_k(kb, 4u * i4, p.dk)); }
    let c = qk * exp(bt - bs);
    let vb = row(b, s, h, p.dv);
    for (var j4 = 0u; j4 < p.dv4; j4++) { acc[j4] += c * ld_v(vb, 4u * j4, p.dv); }
  }
  let ob = row(b, t, h, p.dv);
  for (var j4 = 0u; j4 < p.dv4; j4++) {
    let x = p.scale * acc[j4];
    let j = 4u * j4;
    o[ob + j] = x.x;
    if (j + 1u < p.dv) { o[ob + j + 1u] = x.y; }
    if (j + 2u < p.dv) { o[ob + j + 2u] = x.z; }
    if (j + 3u < p.dv) { o[ob + j + 3u] = x.w; }
  }
}
