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
// of 4 the channels past HS read as 0 (the loads stay inside the buffer or are discarded). Every
// read of qkv goes through here and converts, so flash_attention.ts can declare qkv array<f16>
// (mixed precision) and nothing else changes.
fn ld_qkv(base: u32, j: u32) -> vec4<f32> {
  let i = base + 4u * j;
  if (HS % 4u == 0u) {
    return vec4<f32>(f32(qkv[i]), f32(qkv[i + 1u]), f32(qkv[i + 2u]), f32(qkv[i + 3u]));
  }
  let n = HS - 4u * j;
  return vec4<f32>(
    f32(qkv[i]),
    select(0.0, f32(qkv[i + 1u]), n > 1u),
    select(0.0, f32(qkv[i + 2u]), n > 2u),
    select(0.0, f32(qkv[i + 3u]), n > 3u),
  );
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

// Workgroup index in a grid1d(·, 1) grid (the tiled kernels run one workgroup per row block).
fn group_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return wid.x + wid.y * groups.x;
}

// Where a workgroup of the tiled kernels (flash_attention_tiled*.wgsl) works: a block of `br`
// rows of one (b, h). Nothing here depends on the invocation, so bounds derived from it keep
// barriers and subgroup shuffles in uniform control flow; each kernel adds its own row (first +
// local index) outside, since a struct holding one non-uniform field is non-uniform as a whole.
struct Block {
  bh: u32,     // b·nh + h: row bh·T + t of lse and D
  first: u32,
  c3: u32,
  qb: u32,     // q, k, v of head h at token (b, 0); token t adds t·c3
  kb: u32,
  vb: u32,
  ob: u32,     // y, dy of head h at token (b, 0); token t adds t·C
}

// Workgroups holding a block; past this, whole workgroups return before any barrier or shuffle.
fn tiled_groups(br: u32) -> u32 {
  return p.b * p.nh * ((p.t + br - 1u) / br);
}

fn tiled_block(g: u32, br: u32) -> Block {
  let blocks = (p.t + br - 1u) / br;
  let bh = g / blocks;
  let tok0 = (bh / p.nh) * p.t;
  let hoff = (bh % p.nh) * HS;
  let c3 = 3u * p.c;
  let qb = tok0 * c3 + hoff;
  return Block(bh, (g % blocks) * br, c3, qb, qb + p.c, qb + 2u * p.c, tok0 * p.c + hoff);
}

// The streamed keys a block of query rows needs: s < key_end (uniform); causal blocks stop at
// their last row. Row t itself sees s < key_lim(t) ≤ key_end, t clamped into T.
fn key_end(first: u32, br: u32) -> u32 {
  var e = min(p.t, p.hi);
  if (p.causal != 0u) {
    e = min(e, first + br);
  }
  return e;
}

fn key_lim(t: u32) -> u32 {
  var e = min(p.t, p.hi);
  if (p.causal != 0u) {
    e = min(e, t + 1u);
  }
  return e;
}

// The streamed queries a block of key rows needs start at query_start (uniform); causal blocks
// skip those before their first key. Key row s itself sees t ≥ query_min(s), s clamped into T.
fn query_start(first: u32) -> u32 {
  return select(p.lo, max(p.lo, first), p.causal != 0u);
}

fn query_min(s: u32) -> u32 {
  return select(0u, s, p.causal != 0u);
}

// Whole head rows for the tiled kernels' private arrays: constant trip counts (HS4) so a GPU
// compiler unrolls them and keeps the arrays in registers (docs/design.md#webgpu-limits-that-shape-the-kernels).
// `scale` folds the softmax scale into q or k at load (1.0 elsewhere: exact).
fn ld_qkv_row(base: u32, scale: f32) -> array<vec4<f32>, HS4> {
  var r: array<vec4<f32>, HS4>;
  for (var j = 0u; j < HS4; j++) {
    r[j] = ld_qkv(base, j) * scale;
  }
  return r;
}

fn ld_dy_row(base: u32) -> array<vec4<f32>, HS4> {
  var r: array<vec4<f32>, HS4>;
  for (var j = 0u; j < HS4; j++) {
    r[j] = ld_dy(base, j);
  }
  return r;
}

fn st_out_row(base: u32, r: array<vec4<f32>, HS4>, scale: f32, add: bool) {
  for (var j = 0u; j < HS4; j++) {
    st_out(base, j, r[j] * scale, add);
  }
}

// A tiled forward row's O, m and ℓ: carried over from the previous chunk (in y, lse and lsum),
// or zero, NEG and 0 on the first.
struct FwdRow {
  o: array<vec4<f32>, HS4>,
  m: f32,
  l: f32,
}

fn fwd_row_start(yrow: u32, lrow: u32) -> FwdRow {
  var r = FwdRow(array<vec4<f32>, HS4>(), NEG, 0.0);
  if (p.first == 0u) {
    for (var j = 0u; j < HS4; j++) {
      r.o[j] = ld_out(yrow, j);
    }
    r.m = lseo[lrow];
    r.l = lsum[lrow];
  }
  return r;
}

// Only the last chunk normalises and stores L = m + log ℓ; earlier ones keep O unnormalised and
// m, ℓ for the next to resume from.
fn fwd_row_store(yrow: u32, lrow: u32, o: array<vec4<f32>, HS4>, m: f32, l: f32) {
  var inv = 1.0 / l;
  var lv = m + log(l);
  if (p.final_ == 0u) {
    inv = 1.0;
    lv = m;
    lsum[lrow] = l;
  }
  st_out_row(yrow, o, inv, false);
  lseo[lrow] = lv;
}
