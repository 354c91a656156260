// Exact top-k selection per row (top-k attention at inference, kernels/select_k.ts): which k
// entries of each row are the largest, ties going to the lower index, as a stable sort by
// value, largest first, would pick them.
//
// `select_k` (one workgroup per row) finds the k-th largest value by a radix select on the
// value's order-preserving 32-bit key, eight bits a round from the top: each round histograms
// the entries that still match the key's prefix, and one invocation walks the 256 buckets
// from the largest down to the one holding the k-th entry. Four passes give the exact key K
// and how many entries equal to K still belong to the top k. No sort, no T-sized scratch.
// `mask` (one invocation per row) keeps the entries above K and the first `ties` equal to K
// in index order, and writes −∞ over the rest of the row's live entries, so a softmax after
// it gives them probability exactly 0.
//
// Bindings: 0 x (read_write: the rows; `mask` writes it), 1 sel (read_write: (K, ties) per row),
// 2 p (uniform).

struct Params {
  rows: u32, n: u32, k: u32, causal: u32, // row r has n entries; causal: the live ones are 0…r mod n
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> sel: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;
// A row with k or fewer live entries keeps them all: K = 0 is below every float's key but the
// all-ones NaN's, and that one is a kept tie.
const KEEP_ALL: u32 = 0xffffffffu;

var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> found: vec2<u32>; // (prefix of K so far, entries equal to it still to keep)

// Monotone map of f32 to u32: a < b as floats iff key(a) < key(b), and −0 and +0 share a key,
// as they compare equal (a tie, broken by index like any other).
fn key(v: f32) -> u32 {
  let u = select(bitcast<u32>(v), 0u, v == 0.0);
  return select(u | 0x80000000u, ~u, (u & 0x80000000u) != 0u);
}

fn live_len(row: u32) -> u32 {
  if (p.causal != 0u) { return row % p.n + 1u; }
  return p.n;
}

@compute @workgroup_size(WG)
fn select_k(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * groups.x;
  if (row >= p.rows) { return; }
  let len = live_len(row);
  let base = row * p.n;
  if (len <= p.k) {
    if (lid == 0u) { sel[2u * row] = 0u; sel[2u * row + 1u] = KEEP_ALL; }
    return;
  }
  if (lid == 0u) { found = vec2<u32>(0u, p.k); }
  for (var round = 0u; round < 4u; round++) {
    let shift = 24u - 8u * round;
    atomicStore(&hist[lid], 0u);
    workgroupBarrier();
    let prefix = found.x;
    for (var i = lid; i < len; i += WG) {
      let kk = key(x[base + i]);
      // Entries whose higher bytes differ from K's are already above or below the k-th.
      if (round == 0u || (kk >> (shift + 8u)) == (prefix >> (shift + 8u))) {
        atomicAdd(&hist[(kk >> shift) & 255u], 1u);
      }
    }
    workgroupBarrier();
    if (lid == 0u) {
      var left = found.y;
      var bucket = 255u;
      loop {
        let c = atomicLoad(&hist[bucket]);
        if (c >= left || bucket == 0u) { break; }
        left -= c;
        bucket -= 1u;
      }
      found = vec2<u32>(prefix | (bucket << shift), left);
    }
    workgroupBarrier();
  }
  if (lid == 0u) { sel[2u * row] = found.x; sel[2u * row + 1u] = found.y; }
}

@compute @workgroup_size(64)
fn mask(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let row = gid.x + gid.y * groups.x * 64u;
  if (row >= p.rows) { return; }
  let len = live_len(row);
  let base = row * p.n;
  let kth = sel[2u * row];
  var ties = sel[2u * row + 1u];
  // −∞ made at run time: a constant expression may not evaluate to an infinity.
  let neg_inf = bitcast<f32>(0xff800000u | (p.rows & 0u));
  for (var s = 0u; s < len; s++) {
    let kk = key(x[base + s]);
    if (kk > kth) { continue; }
    if (kk == kth && ties > 0u) {
      ties -= 1u;
      continue;
    }
    x[base + s] = neg_inf;
  }
}
