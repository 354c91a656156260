// Mamba selective scan, forward (Gu & Dao 2023; state-spaces/mamba `selective_scan_ref`):
//   Δ_t = softplus(δ_t + bias); h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t (h_0 = 0);
//   y_t = C_t·h_t + D u_t; out_t = y_t · silu(z_t) (or y_t when has_z = 0).
// Layouts: u, delta, z, out (B, T, D); Bm, Cm (B, T, N); prm = [A (D, N) | Dskip (D) | bias (D)];
// states (B, D, nc, N) holds h entering each chunk of CH steps (zero for chunk 0).
//
// One invocation per (b, d) walks the chunks [c_lo, c_hi) and, inside a chunk, one state
// component n at a time: the N recurrences of a channel are independent, so only per-step
// arrays of CH values are private and N stays a runtime size. A dispatch that starts at
// c_lo > 0 resumes from states[c_lo], which the previous dispatch wrote (CPU adapters split
// long sequences this way to stay under lavapipe's per-invocation loop cap).
//
// The backward (selective_scan_bwd.wgsl) includes this file and binds 8 … 19; every entry
// point binds at most 8 storage buffers (the WebGPU default limit).

struct Params {
  b: u32,
  t: u32,
  d: u32,
  n: u32,
  nc: u32,      // ⌈T / CH⌉
  c_lo: u32,    // chunks [c_lo, c_hi) in this dispatch
  c_hi: u32,
  has_z: u32,
  d_lo: u32,    // channels [d_lo, d_hi) in this dispatch (bwd_bc)
  d_hi: u32,
  off_st: u32,  // offsets into the backward scratch wk: saved states,
  off_dh: u32,  // carried state gradients (B, D, nc, N),
  off_da: u32,  // dA partials (B, D, N),
  off_dd: u32,  // dD partials (B, D),
  off_db: u32,  // dbias partials (B, D)
  _pad: u32,
}

const CH: u32 = 32u;
const WG: u32 = 64u;

@group(0) @binding(0) var<storage, read> u: array<f32>;
@group(0) @binding(1) var<storage, read> delta: array<f32>;
@group(0) @binding(2) var<storage, read> bm: array<f32>;
@group(0) @binding(3) var<storage, read> cm: array<f32>;
@group(0) @binding(4) var<storage, read> z: array<f32>;
@group(0) @binding(5) var<storage, read> prm: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> states: array<f32>;
@group(0) @binding(20) var<uniform> p: Params;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG;
}

// log(1 + eˣ) without overflow; log1p(e) = log(w)·e/(w − 1) keeps precision when e ≪ 1.
fn softplus(x: f32) -> f32 {
  let e = exp(-abs(x));
  let w = 1.0 + e;
  let l = select(log(w) * e / (w - 1.0), e, w == 1.0);
  return max(x, 0.0) + l;
}

fn sigmoid(x: f32) -> f32 {
  return 1.0 / (1.0 + exp(-x));
}

// One chunk of steps of channel (b, d): out for its steps, from the state read at states[h_in + n]
// (or zero, written there, when `load` is false) to the state written at states[h_out + n]
// (when `store`).
fn scan_chunk(b: u32, d: u32, c: u32, h_in: u32, load: bool, h_out: u32, store: bool) {
  let dn = p.d * p.n;
  let dskip = prm[dn + d];
  let bias = prm[dn + p.d + d];
  var dt: array<f32, CH>;
  var uu: array<f32, CH>;
  var acc: array<f32, CH>;
  let t0 = c * CH;
  let len = min(CH, p.t - t0);
  for (var k = 0u; k < len; k++) {
    let idx = (b * p.t + t0 + k) * p.d + d;
    dt[k] = softplus(delta[idx] + bias);
    uu[k] = u[idx];
    acc[k] = dskip * uu[k];
  }
  for (var n = 0u; n < p.n; n++) {
    let a = prm[d * p.n + n];
    var h = 0.0;
    if (load) {
      h = states[h_in + n];
    } else {
      states[h_in + n] = 0.0;
    }
    for (var k = 0u; k < len; k++) {
      let bt = (b * p.t + t0 + k) * p.n + n;
      h = fma(exp(dt[k] * a), h, dt[k] * bm[bt] * uu[k]);
      acc[k] = fma(cm[bt], h, acc[k]);
    }
    if (store) {
      states[h_out + n] = h;
    }
  }
  for (var k = 0u; k < len; k++) {
    let idx = (b * p.t + t0 + k) * p.d + d;
    var y = acc[k];
    if (p.has_z != 0u) {
      let zz = z[idx];
      y = y * zz * sigmoid(zz);
    }
    out[idx] = y;
  }
}

// The scan from h = 0, saving the state entering every chunk in states (B, D, nc, N).
@compute @workgroup_size(WG)
fn fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.b * p.d) { return; }
  let sbase = i * p.nc * p.n;
  for (var c = p.c_lo; c < p.c_hi; c++) {
    scan_chunk(i / p.d, i % p.d, c, sbase + c * p.n, c > 0u, sbase + (c + 1u) * p.n, c + 1u < p.nc);
  }
}

// Decoding (Mamba's selective_state_update, docs/design.md#decoding-state-of-the-recurrent-layers): here states is the
// carried state (B, D, N), read as the h before this pass's first step and overwritten with the h after its last; no
// chunk-entry states are kept (no backward).
@compute @workgroup_size(WG)
fn fwd_carry(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.b * p.d) { return; }
  for (var c = p.c_lo; c < p.c_hi; c++) {
    scan_chunk(i / p.d, i % p.d, c, i * p.n, true, i * p.n, true);
  }
}
