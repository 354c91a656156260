// Token + learned position embedding (GPT-2): out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
//
// The backward sums dout rows that share a token (dwte) or a position (dwpe). No float
// atomics, so every dwte / dwpe element is owned by one invocation that loops over the rows
// it gathers: for dwte those are listed by a token index built on the CPU (a counting sort of
// the batch: positions[offsets[v] .. offsets[v+1]) are the flat positions b·T + t holding v).
//   wte_vocab: one invocation per (v, c) — when V ≤ B·T (char-level).
//   wte_slots: one invocation per (slot j of the sorted positions, c); only the first slot of
//              each token's run works — when V > B·T (GPT-2 BPE), so the grid is B·T·C, not V·C.
// Both take the run [seg_lo, seg_hi) of each token's list (p.lo, p.hi relative to its start), so
// the TS side can split very frequent tokens over several dispatches (lavapipe caps each
// invocation's loop iterations).
//
// Bindings: 0 tokens (B·T) i32   1 wte (V,C)   2 wpe (Tmax,C)   3 out (B·T,C)
//           4 offsets (V+1) u32   5 positions (B·T) u32   6 dout (B·T,C)
//           7 dwte (V,C) +=   8 dwpe (Tmax,C) +=   9 params

struct Params {
  bt: u32,        // B·T
  t: u32,         // T
  c: u32,         // C
  v: u32,         // V
  lo: u32,        // first occurrence (relative) of each token this dispatch sums
  hi: u32,        // end of that range (relative)
  nan_bits: u32,  // 0x7fc00000: a runtime NaN (a constant NaN is a WGSL compile error)
  _pad: u32,
}

@group(0) @binding(0) var<storage, read> tokens: array<i32>;
@group(0) @binding(1) var<storage, read> wte: array<f32>;
@group(0) @binding(2) var<storage, read> wpe: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> offsets: array<u32>;
@group(0) @binding(5) var<storage, read> positions: array<u32>;
@group(0) @binding(6) var<storage, read> dout: array<f32>;
@group(0) @binding(7) var<storage, read_write> dwte: array<f32>;
@group(0) @binding(8) var<storage, read_write> dwpe: array<f32>;
@group(0) @binding(9) var<uniform> p: Params;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * 256u;
}

// Grid: x over columns (64 per workgroup), y over t, z over b — no integer division per
// element (CPU adapters cannot vectorise it). A token id outside [0, V) cannot be reported
// from the GPU; its row becomes NaN instead of silently reading another row of wte.
@compute @workgroup_size(64)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>) {
  let col = gid.x;
  let c = p.c;
  if (col >= c) { return; }
  let row = gid.z * p.t + gid.y;
  let tok = tokens[row];
  var e = bitcast<f32>(p.nan_bits);
  if (tok >= 0 && u32(tok) < p.v) {
    e = wte[u32(tok) * c + col];
  }
  out[row * c + col] = e + wpe[gid.y * c + col];
}

// dwte[v, col] += Σ over the token's occurrences [lo, hi) of dout[pos, col].
fn token_sum(v: u32, col: u32) -> f32 {
  let c = p.c;
  let start = offsets[v];
  let end = min(offsets[v + 1u], start + p.hi);
  var s = 0.0;
  for (var j = start + p.lo; j < end; j++) {
    s += dout[positions[j] * c + col];
  }
  return s;
}

@compute @workgroup_size(256)
fn wte_vocab(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  let c = p.c;
  if (i >= p.v * c) { return; }
  let v = i / c;
  // Tokens absent from the batch (or with no occurrence in this range) keep their gradient
  // untouched: no write at all.
  if (offsets[v + 1u] - offsets[v] <= p.lo) { return; }
  dwte[i] += token_sum(v, i - v * c);
}

@compute @workgroup_size(256)
fn wte_slots(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  let c = p.c;
  if (i >= p.bt * c) { return; }
  let j = i / c;
  // The token v whose run holds slot j: offsets[v] ≤ j < offsets[v + 1], by bisection
  // (offsets[0] = 0 ≤ j < offsets[V] = B·T keeps the invariant offsets[lo] ≤ j < offsets[hi]).
  var lo = 0u;
  var hi = p.v;
  while (hi - lo > 1u) {
    let mid = (lo + hi) / 2u;
    if (offsets[mid] <= j) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  // Only the run's first slot owns the token's row of dwte.
  if (offsets[lo] != j || offsets[lo + 1u] - j <= p.lo) { return; }
  let col = i - j * c;
  dwte[lo * c + col] += token_sum(lo, col);
}

// dwpe[t, col] += Σ_b dout[b·T + t, col]; rows t ≥ T are not in the grid.
@compute @workgroup_size(256)
fn wpe_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  let c = p.c;
  let tc = p.t * c;
  if (i >= tc) { return; }
  var s = 0.0;
  for (var r = i; r < p.bt * c; r += tc) {
    s += dout[r];
  }
  dwpe[i] += s;
}
