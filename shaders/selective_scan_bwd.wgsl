// Mamba selective scan, backward (state-spaces/mamba `selective_scan_ref`; docs/design.md#selective-scan).
// With g = dout·silu(z) (the gradient of y), the gradient of h_t is the reverse recurrence
//   dh_t = C_t g_t + Ā_{t+1} dh_{t+1},  Ā_t = exp(Δ_t A),
// and du_t = D g_t + Σ_n dh_t Δ_t B_t;  dΔ_t = Σ_n dh_t (B_t u_t + A Ā_t h_{t−1});
// dδ = dΔ·σ(δ + bias);  dA = Σ_{b,t} dh Δ Ā h_{t−1};  dB_t = Σ_d dh_t Δ_t u_t;  dC_t = Σ_d g_t h_t.
// h is recomputed inside each chunk from the forward's saved chunk-entry states.
//
// Entry points (all gradients accumulate):
//   gate_bwd   per (b, t, d): dz += dout·y·silu′(z); ybuf ← g = dout·silu(z) in place.
//   bwd_main   per (b, d), chunks [c_lo, c_hi) last to first: du, dδ; per-(b, d) partials of
//              dA, dD, dbias; and the state gradient entering each chunk (wk[off_dh]), carried
//              to the next dispatch and read by bwd_bc.
//   bwd_bc     per (b, chunk, n), channels [d_lo, d_hi): dB and dC, each element owned by one
//              invocation that loops over channels (no atomics, no (B, T, D, N) buffer).
//   bwd_reduce per (d, n): sums the partials over b into dA, dD, dbias.
// wk = [A (D, N) | Dskip (D) | bias (D) | states | dh carry | dA, dD, dbias partials], one
// scratch so that no entry point binds more than 8 storage buffers.
//!include selective_scan

@group(0) @binding(8) var<storage, read> gin: array<f32>;
@group(0) @binding(9) var<storage, read_write> wk: array<f32>;
@group(0) @binding(10) var<storage, read_write> du: array<f32>;
@group(0) @binding(11) var<storage, read_write> ddelta: array<f32>;
@group(0) @binding(12) var<storage, read_write> ybuf: array<f32>;
@group(0) @binding(13) var<storage, read_write> dz: array<f32>;
@group(0) @binding(14) var<storage, read_write> dbm: array<f32>;
@group(0) @binding(15) var<storage, read_write> dcm: array<f32>;
@group(0) @binding(16) var<storage, read_write> da: array<f32>;
@group(0) @binding(17) var<storage, read_write> dd: array<f32>;
@group(0) @binding(18) var<storage, read_write> dbias: array<f32>;

@compute @workgroup_size(WG)
fn gate_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.b * p.t * p.d) { return; }
  let zz = z[i];
  let s = sigmoid(zz);
  let go = gin[i];
  dz[i] = dz[i] + go * ybuf[i] * s * (1.0 + zz * (1.0 - s));
  ybuf[i] = go * zz * s;
}

@compute @workgroup_size(WG)
fn bwd_main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.b * p.d) { return; }
  let d = i % p.d;
  let b = i / p.d;
  let dn = p.d * p.n;
  let dskip = wk[dn + d];
  let bias = wk[dn + p.d + d];
  let sbase = i * p.nc * p.n;
  var dt: array<f32, CH>;
  var uu: array<f32, CH>;
  var gg: array<f32, CH>;
  var hs: array<f32, CH>;
  var dec: array<f32, CH>;
  var dua: array<f32, CH>;
  var dta: array<f32, CH>;
  var dsum = 0.0;
  var bsum = 0.0;
  for (var cc = p.c_lo; cc < p.c_hi; cc++) {
    let c = p.c_hi - 1u - (cc - p.c_lo);
    let t0 = c * CH;
    let len = min(CH, p.t - t0);
    for (var k = 0u; k < len; k++) {
      let idx = (b * p.t + t0 + k) * p.d + d;
      dt[k] = softplus(delta[idx] + bias);
      uu[k] = u[idx];
      gg[k] = gin[idx];
      dua[k] = dskip * gg[k];
      dta[k] = 0.0;
      dsum = fma(gg[k], uu[k], dsum);
    }
    for (var n = 0u; n < p.n; n++) {
      let a = wk[d * p.n + n];
      let sidx = sbase + c * p.n + n;
      var h0 = 0.0;
      if (c > 0u) { h0 = wk[p.off_st + sidx]; }
      var h = h0;
      for (var k = 0u; k < len; k++) {
        let bt = (b * p.t + t0 + k) * p.n + n;
        dec[k] = exp(dt[k] * a);
        h = fma(dec[k], h, dt[k] * bm[bt] * uu[k]);
        hs[k] = h;
      }
      // Ā_{t+1} dh_{t+1} from the chunk to the right; zero past the last step.
      var dh = 0.0;
      if (c + 1u < p.nc) { dh = wk[p.off_dh + sidx]; }
      var das = 0.0;
      for (var kk = 0u; kk < len; kk++) {
        let k = len - 1u - kk;
        let bt = (b * p.t + t0 + k) * p.n + n;
        dh = fma(cm[bt], gg[k], dh);
        var hprev = h0;
        if (k > 0u) { hprev = hs[k - 1u]; }
        let bv = bm[bt];
        dua[k] = fma(dh * dt[k], bv, dua[k]);
        dta[k] = fma(dh, fma(bv, uu[k], a * dec[k] * hprev), dta[k]);
        das = fma(dh * dt[k], dec[k] * hprev, das);
        dh = dec[k] * dh;
      }
      if (c > 0u) { wk[p.off_dh + sidx - p.n] = dh; }
      wk[p.off_da + i * p.n + n] += das;
    }
    for (var k = 0u; k < len; k++) {
      let idx = (b * p.t + t0 + k) * p.d + d;
      du[idx] = du[idx] + dua[k];
      let g = dta[k] * sigmoid(delta[idx] + bias);
      ddelta[idx] = ddelta[idx] + g;
      bsum += g;
    }
  }
  wk[p.off_dd + i] += dsum;
  wk[p.off_db + i] += bsum;
}

@compute @workgroup_size(WG)
fn bwd_bc(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.b * p.nc * p.n) { return; }
  let n = i % p.n;
  let c = (i / p.n) % p.nc;
  let b = i / (p.n * p.nc);
  let t0 = c * CH;
  let len = min(CH, p.t - t0);
  let dn = p.d * p.n;
  var dts: array<f32, CH>;
  var dec: array<f32, CH>;
  var hs: array<f32, CH>;
  var accb: array<f32, CH>;
  var accc: array<f32, CH>;
  for (var d = p.d_lo; d < p.d_hi; d++) {
    let a = wk[d * p.n + n];
    let bias = wk[dn + p.d + d];
    let sidx = ((b * p.d + d) * p.nc + c) * p.n + n;
    var h = 0.0;
    if (c > 0u) { h = wk[p.off_st + sidx]; }
    for (var k = 0u; k < len; k++) {
      let idx = (b * p.t + t0 + k) * p.d + d;
      let bt = (b * p.t + t0 + k) * p.n + n;
      dts[k] = softplus(delta[idx] + bias);
      dec[k] = exp(dts[k] * a);
      h = fma(dec[k], h, dts[k] * bm[bt] * u[idx]);
      hs[k] = h;
    }
    var dh = 0.0;
    if (c + 1u < p.nc) { dh = wk[p.off_dh + sidx]; }
    for (var kk = 0u; kk < len; kk++) {
      let k = len - 1u - kk;
      let idx = (b * p.t + t0 + k) * p.d + d;
      let bt = (b * p.t + t0 + k) * p.n + n;
      let g = gin[idx];
      dh = fma(cm[bt], g, dh);
      accc[k] = fma(g, hs[k], accc[k]);
      accb[k] = fma(dh * dts[k], u[idx], accb[k]);
      dh = dec[k] * dh;
    }
  }
  for (var k = 0u; k < len; k++) {
    let bt = (b * p.t + t0 + k) * p.n + n;
    dbm[bt] = dbm[bt] + accb[k];
    dcm[bt] = dcm[bt] + accc[k];
  }
}

@compute @workgroup_size(WG)
fn bwd_reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.d * p.n) { return; }
  let n = i % p.n;
  let d = i / p.n;
  var sa = 0.0;
  var sd = 0.0;
  var sb = 0.0;
  for (var b = 0u; b < p.b; b++) {
    sa += wk[p.off_da + (b * p.d + d) * p.n + n];
    sd += wk[p.off_dd + b * p.d + d];
    sb += wk[p.off_db + b * p.d + d];
  }
  da[i] = da[i] + sa;
  if (n == 0u) {
    dd[d] = dd[d] + sd;
    dbias[d] = dbias[d] + sb;
  }
}
