// Attention of one new query row over a KV cache (docs/design.md#decoding-with-a-kv-cache), two entry points:
//   append: k_cache[b, h, pos + i, :] = k of token src0 + i, v_cache likewise, for t tokens of
//           qkv (B, tq, 3C) (head h = channels h·hs … (h+1)·hs of each third);
//   decode: y (B, 1, C) = softmax(scale · q kᵀ over the cached keys 0 … len−1) · V, one
//           workgroup per (b, h). No causal mask: the cache holds only positions ≤ the query's.
// Caches are (B, nh, Tmax, hs), so the keys of one (b, h) are one contiguous run and the value
// loop reads whole rows, consecutive invocations consecutive channels.
// The softmax is the stable one: scores go to a (B, nh, Tmax) scratch, the workgroup reduces
// their max m, then ℓ = Σ exp(s − m), and y = Σ exp(s − m)·v / ℓ. Loops stop at len, so any
// len ≥ 1 (ragged, not a multiple of the workgroup) is exact.
//
// With mode = 1 (decode's partial form, docs/design.md#tree-attention-decoding) binding 3 is the partial
// (B, nh, hs + 2) instead: per (b, h) the row [m, ℓ, o_0 … o_{hs−1}] with o = Σ exp(s − m)·v left
// unnormalised, so partials over disjoint shards of the cache merge exactly (tree or ring decode).
//
// Bindings: 0 qkv (B·t, 3C)   1 k_cache (B, nh, Tmax, hs)   2 v_cache (same)   3 y (B, C) or
//           partial (B, nh, hs + 2)   4 scratch (B, nh, Tmax)   5 params

const WG: u32 = 64u;
// Largest head size: the query row sits in workgroup memory.
const MAX_HS: u32 = 128u;

struct Params {
  b: u32,      // batch B
  t: u32,      // new tokens per row (append)
  c: u32,      // width C = nh·hs
  nh: u32,     // heads
  hs: u32,     // head size
  tmax: u32,   // cache rows per (b, h)
  pos: u32,    // append: first cache row written
  len: u32,    // decode: cached keys attended (0 … len−1)
  scale: u32,  // bits of 1/√hs
  mode: u32,   // decode: 0 writes y = o/ℓ, 1 writes the partial [m, ℓ, o]
  // append: first token of qkv appended (a rank keeps its shard's tokens, docs/design.md#tree-attention-decoding)
  src0: u32,
  tq: u32,     // append: tokens per row of qkv (t when all of them are appended)
}

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

var<workgroup> q_row: array<f32, MAX_HS>;
var<workgroup> red: array<f32, WG>;

// One invocation per (token row, channel) of the new tokens: B·t·C in all.
@compute @workgroup_size(WG)
fn kv_append(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * WG;
  if (i >= p.b * p.t * p.c) { return; }
  let row = i / p.c;          // b·t + token
  let ch = i % p.c;
  let b = row / p.t;
  let tok = row % p.t;
  let h = ch / p.hs;
  let d = ch % p.hs;
  let dst = ((b * p.nh + h) * p.tmax + p.pos + tok) * p.hs + d;
  let src = (b * p.tq + p.src0 + tok) * 3u * p.c + p.c + ch;
  k_cache[dst] = qkv[src];
  v_cache[dst] = qkv[src + p.c];
}

// Tree reduction of red[0 … WG) by max (is_max) or sum; every invocation returns the result.
fn reduce_wg(lid: u32, is_max: bool) -> f32 {
  for (var s = WG / 2u; s > 0u; s = s / 2u) {
    workgroupBarrier();
    if (lid < s) {
      if (is_max) { red[lid] = max(red[lid], red[lid + s]); } else { red[lid] = red[lid] + red[lid + s]; }
    }
  }
  workgroupBarrier();
  let r = red[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(WG)
fn decode(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid3: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let bh = wid.x + wid.y * groups.x;  // uniform across the workgroup
  if (bh >= p.b * p.nh) { return; }
  let lid = lid3.x;
  let b = bh / p.nh;
  let h = bh % p.nh;
  let hs = p.hs;
  let scale = bitcast<f32>(p.scale);
  for (var d = lid; d < hs; d += WG) {
    q_row[d] = qkv[b * 3u * p.c + h * hs + d];
  }
  workgroupBarrier();

  // Scores of the keys lid, lid + WG, …; their max.
  let kb = bh * p.tmax * hs;
  let sb = bh * p.tmax;
  var m = -3.0e38;
  for (var s = lid; s < p.len; s += WG) {
    var dot = 0.0;
    for (var d = 0u; d < hs; d++) { dot += q_row[d] * k_cache[kb + s * hs + d]; }
    let sc = dot * scale;
    scratch[sb + s] = sc;
    m = max(m, sc);
  }
  red[lid] = m;
  m = reduce_wg(lid, true);

  // Probabilities (unnormalised) in place of the scores; their sum ℓ.
  var l = 0.0;
  for (var s = lid; s < p.len; s += WG) {
    let e = exp(scratch[sb + s] - m);
    scratch[sb + s] = e;
    l += e;
  }
  red[lid] = l;
  l = reduce_wg(lid, false);
  // Each invocation now reads every probability, written by the others.
  storageBarrier();
  workgroupBarrier();

  // The mode is uniform, so both branches keep the workgroup's control flow uniform.
  let part = bh * (hs + 2u);
  if (p.mode == 1u && lid == 0u) {
    y[part] = m;
    y[part + 1u] = l;
  }
  for (var d = lid; d < hs; d += WG) {
    var acc = 0.0;
    for (var s = 0u; s < p.len; s++) { acc += scratch[sb + s] * v_cache[kb + s * hs + d]; }
    if (p.mode == 1u) { y[part + 2u + d] = acc; } else { y[b * p.c + h * hs + d] = acc / l; }
  }
}
