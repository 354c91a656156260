// Causal depthwise conv1d of the Mamba block (state-spaces/mamba, causal_conv1d):
// x, y, dy, dx (B, T, D) contiguous; w (D, K); bias (D);
// y_t[d] = bias[d] + Σ_{j<K} w[d, j] · x_{t−K+1+j}[d] (zero before t = 0).
// One invocation per element for `fwd` and `bwd_dx`; dw and dbias are sums over B·T, so
// `bwd_part` writes one partial per (block of rows, channel) and `bwd_reduce` sums the blocks
// (no float atomics in WebGPU). Each entry point binds only the buffers it names.
// Decoding (`fwd_carry`, `carry_shift`) carries the conv state between passes: window
// (B, K−1, D) holds the K−1 inputs before this pass's t = 0, oldest first (causal_conv1d_update).

struct Params {
  b: u32,
  t: u32,
  d: u32,
  rows: u32,   // B·T
  rpb: u32,    // rows per block in bwd_part
  nblk: u32,   // ⌈rows / rpb⌉
  _p0: u32,
  _p1: u32,
}

const K: u32 = 4u;
const WG: u32 = 64u;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> outp: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
@group(0) @binding(6) var<storage, read_write> dw: array<f32>;
@group(0) @binding(7) var<storage, read_write> dbias: array<f32>;
@group(0) @binding(8) var<storage, read_write> window: array<f32>;
@group(0) @binding(9) var<uniform> p: Params;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG;
}

// y = conv(x) + bias, one invocation per (b, t, d).
@compute @workgroup_size(WG)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.rows * p.d) { return; }
  let d = i % p.d;
  let t = (i / p.d) % p.t;
  var acc = bias[d];
  for (var j = 0u; j < K; j++) {
    let back = K - 1u - j; // how many steps in the past tap j reads
    if (t >= back) {
      acc = fma(w[d * K + j], x[i - back * p.d], acc);
    }
  }
  outp[i] = acc;
}

// dx_s[d] += Σ_j w[d, j] · dy_{s+K−1−j}[d], one invocation per (b, s, d).
@compute @workgroup_size(WG)
fn bwd_dx(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.rows * p.d) { return; }
  let d = i % p.d;
  let s = (i / p.d) % p.t;
  var acc = 0.0;
  for (var j = 0u; j < K; j++) {
    let ahead = K - 1u - j;
    if (s + ahead < p.t) {
      acc = fma(w[d * K + j], dy[i + ahead * p.d], acc);
    }
  }
  outp[i] = outp[i] + acc;
}

// part[(blk, d, j)] = Σ over the block's rows of dy·x (j < K) and of dy (j = K, the bias).
@compute @workgroup_size(WG)
fn bwd_part(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.nblk * p.d) { return; }
  let d = i % p.d;
  let blk = i / p.d;
  let r0 = blk * p.rpb;
  let r1 = min(p.rows, r0 + p.rpb);
  var acc: array<f32, K>;
  var db = 0.0;
  for (var r = r0; r < r1; r++) {
    let g = dy[r * p.d + d];
    let t = r % p.t;
    db += g;
    for (var j = 0u; j < K; j++) {
      let back = K - 1u - j;
      if (t >= back) {
        acc[j] = fma(x[(r - back) * p.d + d], g, acc[j]);
      }
    }
  }
  let base = i * (K + 1u);
  for (var j = 0u; j < K; j++) {
    part[base + j] = acc[j];
  }
  part[base + K] = db;
}

// dw[d, j] += Σ_blk part[blk, d, j]; dbias[d] += Σ_blk part[blk, d, K]. One invocation per (d, j ≤ K).
@compute @workgroup_size(WG)
fn bwd_reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.d * (K + 1u)) { return; }
  let d = i / (K + 1u);
  let j = i % (K + 1u);
  var s = 0.0;
  for (var blk = 0u; blk < p.nblk; blk++) {
    s += part[(blk * p.d + d) * (K + 1u) + j];
  }
  if (j < K) {
    dw[d * K + j] = dw[d * K + j] + s;
  } else {
    dbias[d] = dbias[d] + s;
  }
}

// y = conv(window ++ x) + bias: as `fwd`, but a tap before t = 0 reads the carried window.
@compute @workgroup_size(WG)
fn fwd_carry(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.rows * p.d) { return; }
  let d = i % p.d;
  let t = (i / p.d) % p.t;
  let b = i / (p.d * p.t);
  var acc = bias[d];
  for (var j = 0u; j < K; j++) {
    let back = K - 1u - j;
    if (t >= back) {
      acc = fma(w[d * K + j], x[i - back * p.d], acc);
    } else {
      acc = fma(w[d * K + j], window[(b * (K - 1u) + K - 1u + t - back) * p.d + d], acc);
    }
  }
  outp[i] = acc;
}

// window ← the last K−1 inputs of window ++ x, one invocation per (b, d). In place: slot j takes
// slot T + j (> j) of the concatenation, so walking j upwards reads every old slot before it is
// overwritten, and no other invocation touches this (b, d).
@compute @workgroup_size(WG)
fn carry_shift(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.b * p.d) { return; }
  let d = i % p.d;
  let b = i / p.d;
  for (var j = 0u; j + 1u < K; j++) {
    let q = p.t + j; // position in window ++ x
    var v: f32;
    if (q < K - 1u) {
      v = window[(b * (K - 1u) + q) * p.d + d];
    } else {
      v = x[(b * p.t + q - (K - 1u)) * p.d + d];
    }
    window[(b * (K - 1u) + j) * p.d + d] = v;
  }
}
