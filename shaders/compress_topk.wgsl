// Exact top-k by magnitude (sparsification, Aji & Heafield 2017; with error feedback, Stich
// et al. 2018): the k elements of largest |x|, ties broken by the lower index, written as
// (index, value) pairs in increasing index order.
//
// The k-th largest key (key = the bits of |x|, which order as the magnitudes do) is found by
// a radix select over its 4 bytes, most significant first: per byte, `histogram` counts the
// keys that match the bytes decided so far into 256 bins (u32 atomics; WGSL has no float
// ones) and `pick` (one invocation) walks the bins from the top to the bin holding the k-th
// key. After 4 rounds sel[0] = T, the k-th largest key, and sel[1] = need, how many keys equal
// to T are taken (the first `need` by index); every key above T is taken. `count` then
// counts, per chunk of CHUNK elements, the keys above T and equal to T; `scan` (one
// invocation) turns the counts into exclusive offsets; `emit` scans each chunk in workgroup
// memory and writes every taken element at its rank among the taken ones:
//   position(i) = #{j < i : key_j > T} + min(#{j < i : key_j = T}, need).
// O(n) work in 12 dispatches. NaN keys sort above +inf.
//
// Bindings: 0 x f32 (read), 1 hist (256 atomic u32), 2 sel u32 ([T, need, then 2 counts per
// chunk]), 3 idx u32 (k), 4 val f32 (k), 5 y f32 (n; scatter), 6 params.

const WG: u32 = 256u;
const PER: u32 = 4u; // elements per invocation in count and emit
const CHUNK: u32 = 1024u; // WG · PER

struct Params {
  n: u32,
  k: u32,
  shift: u32, // the byte this histogram round decides: 24, 16, 8, 0
  mask: u32, // the bits decided before this round
  row_groups: u32, // workgroups per row of a 2-D grid
  _a: u32,
  _b: u32,
  _c: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> hist: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> sel: array<u32>;
@group(0) @binding(3) var<storage, read_write> idx: array<u32>;
@group(0) @binding(4) var<storage, read_write> val: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

var<workgroup> local_hist: array<atomic<u32>, 256>;
var<workgroup> counts: array<u32, WG>;
var<workgroup> chunk_gt: atomic<u32>;
var<workgroup> chunk_eq: atomic<u32>;

fn key(i: u32) -> u32 {
  return bitcast<u32>(x[i]) & 0x7fffffffu;
}

// sel[0] = 0 (no byte decided), sel[1] = k; the histogram starts empty.
@compute @workgroup_size(WG)
fn init(@builtin(local_invocation_index) lid: u32) {
  atomicStore(&hist[lid], 0u);
  if (lid == 0u) {
    sel[0] = 0u;
    sel[1] = p.k;
  }
}

@compute @workgroup_size(WG)
fn histogram(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(num_workgroups) groups: vec3<u32>) {
  atomicStore(&local_hist[lid], 0u);
  workgroupBarrier();
  let prefix = sel[0];
  for (var i = gid.x; i < p.n; i += groups.x * WG) {
    let kk = key(i);
    if ((kk & p.mask) == prefix) {
      atomicAdd(&local_hist[(kk >> p.shift) & 0xffu], 1u);
    }
  }
  workgroupBarrier();
  let c = atomicLoad(&local_hist[lid]);
  if (c > 0u) { atomicAdd(&hist[lid], c); }
}

// The bin, from the top, where the running count reaches sel[1]: that byte of T. Clears the
// histogram for the next round.
@compute @workgroup_size(1)
fn pick() {
  let need = sel[1];
  var above = 0u;
  var d = 0u;
  for (var b = 0u; b < 256u; b++) {
    let c = atomicLoad(&hist[255u - b]);
    if (above + c >= need) {
      d = 255u - b;
      break;
    }
    above += c;
  }
  sel[0] |= d << p.shift;
  sel[1] = need - above;
  for (var b = 0u; b < 256u; b++) { atomicStore(&hist[b], 0u); }
}

fn chunk_id(wid: vec3<u32>) -> u32 {
  return wid.y * p.row_groups + wid.x;
}

@compute @workgroup_size(WG)
fn count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let c = chunk_id(wid);
  if (c * CHUNK >= p.n) { return; }
  if (lid == 0u) {
    atomicStore(&chunk_gt, 0u);
    atomicStore(&chunk_eq, 0u);
  }
  workgroupBarrier();
  let t = sel[0];
  var gt = 0u;
  var eq = 0u;
  for (var j = 0u; j < PER; j++) {
    let i = c * CHUNK + lid * PER + j;
    if (i < p.n) {
      let kk = key(i);
      gt += select(0u, 1u, kk > t);
      eq += select(0u, 1u, kk == t);
    }
  }
  atomicAdd(&chunk_gt, gt);
  atomicAdd(&chunk_eq, eq);
  workgroupBarrier();
  if (lid == 0u) {
    sel[2u + 2u * c] = atomicLoad(&chunk_gt);
    sel[3u + 2u * c] = atomicLoad(&chunk_eq);
  }
}

// Exclusive prefix sums of the chunk counts, in place (one invocation: ⌈n / CHUNK⌉ steps).
@compute @workgroup_size(1)
fn scan() {
  var gt = 0u;
  var eq = 0u;
  let chunks = (p.n + CHUNK - 1u) / CHUNK;
  for (var c = 0u; c < chunks; c++) {
    let g = sel[2u + 2u * c];
    let e = sel[3u + 2u * c];
    sel[2u + 2u * c] = gt;
    sel[3u + 2u * c] = eq;
    gt += g;
    eq += e;
  }
}

@compute @workgroup_size(WG)
fn emit(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let c = chunk_id(wid);
  if (c * CHUNK >= p.n) { return; }
  let t = sel[0];
  let need = sel[1];
  let i0 = c * CHUNK + lid * PER;
  // Counts packed as gt | eq << 16 (at most CHUNK each), so one scan carries both.
  var mine = 0u;
  for (var j = 0u; j < PER; j++) {
    let i = i0 + j;
    if (i < p.n) {
      let kk = key(i);
      mine += select(0u, 1u, kk > t) + select(0u, 0x10000u, kk == t);
    }
  }
  // Inclusive scan over the workgroup (Hillis–Steele), made exclusive by subtracting mine.
  counts[lid] = mine;
  workgroupBarrier();
  for (var off = 1u; off < WG; off <<= 1u) {
    var v = 0u;
    if (lid >= off) { v = counts[lid - off]; }
    workgroupBarrier();
    counts[lid] += v;
    workgroupBarrier();
  }
  let before = counts[lid] - mine;
  var gt = sel[2u + 2u * c] + (before & 0xffffu);
  var eq = sel[3u + 2u * c] + (before >> 16u);
  for (var j = 0u; j < PER; j++) {
    let i = i0 + j;
    if (i < p.n) {
      let kk = key(i);
      if (kk > t || (kk == t && eq < need)) {
        let at = gt + min(eq, need);
        idx[at] = i;
        val[at] = x[i];
      }
      gt += select(0u, 1u, kk > t);
      eq += select(0u, 1u, kk == t);
    }
  }
}

// y[idx[j]] = val[j] for j < k (y cleared before: the decompression of the sparse message).
@compute @workgroup_size(WG)
fn scatter(@builtin(global_invocation_id) gid: vec3<u32>) {
  let j = gid.y * p.row_groups * WG + gid.x;
  if (j >= p.k) { return; }
  y[idx[j]] = val[j];
}
