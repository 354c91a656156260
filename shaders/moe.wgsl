// Mixture-of-experts routing and token movement (src/kernels/moe.ts; Switch Transformer,
// arXiv 2101.03961; GShard, arXiv 2006.16668):
//   softmax_fwd / softmax_bwd   router probabilities p = softmax(z) over E experts, one row per token
//   topk                        the k most probable experts of each token (ties: lowest index)
//   gates_fwd / gates_bwd       combine weights p[n, top_j], optionally renormalised over the k
//   fill_i32                    index buffers set to −1 ("empty slot")
//   assign                      capacity-limited slots: one invocation per (group, expert) walks
//                               the tokens in order, so slot positions follow token order
//                               (Switch / GShard's cumsum-based positions) with no atomics
//   gather_rows                 out[s] = w[idx[s]] · x[idx[s] / div] (0 where idx[s] < 0)
//   gather_sum                  out[n] (+)= Σ_j w[n·k+j] · src[idx[n·k+j]] — a scatter-add written
//                               as a gather over the inverse index, so repeated targets need no atomics
//   row_dots                    out[n·k+j] (+)= ⟨a[n], src[idx[n·k+j]]⟩ (combine's gate gradient)
//   group_colsum                out[g·E+e] += Σ_{n ∈ group g} p[n, e] over a token range
//   aux_fwd / aux_bwd           the load-balancing loss α·E·Σ_e f_e·P_e (Switch eq. 4), per group
// Backward entries ACCUMULATE (+=). Loops are bounded per dispatch (the TS side splits token
// ranges) because lavapipe stops an invocation after 65 535 loop iterations.
//
// Bindings: 0 fa, 1 fb (f32, read), 2 ia (i32, read), 3 fout (f32, rw), 4 iout, 5 iout2,
// 6 icnt (i32, rw), 7 params. Each entry point uses a subset (layout 'auto').

struct Params {
  n: u32,      // rows / tokens
  c: u32,      // row width (C, or E for the router rows)
  k: u32,      // choices per token
  e: u32,      // experts
  j: u32,      // choice processed by this assign pass
  n0: u32,     // token range [n0, n1) of this dispatch
  n1: u32,
  gs: u32,     // tokens per group
  cap: u32,    // capacity per expert and group
  rows: u32,   // rows of one expert's block in the slot buffer (≥ groups · cap)
  flags: u32,  // bit 0 accumulate, bit 1 weighted, bit 2 renormalise, bit 3 previous loss has an aux slot
  alpha: f32,  // aux loss scale
}

@group(0) @binding(0) var<storage, read> fa: array<f32>;
@group(0) @binding(1) var<storage, read> fb: array<f32>;
@group(0) @binding(2) var<storage, read> ia: array<i32>;
@group(0) @binding(3) var<storage, read_write> fout: array<f32>;
@group(0) @binding(4) var<storage, read_write> iout: array<i32>;
@group(0) @binding(5) var<storage, read_write> iout2: array<i32>;
@group(0) @binding(6) var<storage, read_write> icnt: array<i32>;
@group(0) @binding(7) var<uniform> p: Params;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * 64u;
}

fn flag(bit: u32) -> bool {
  return (p.flags & (1u << bit)) != 0u;
}

// fout = p = softmax(fa) per row of p.c entries
@compute @workgroup_size(64)
fn softmax_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let r = index(gid, groups);
  if (r >= p.n) { return; }
  let base = r * p.c;
  var m = fa[base];
  for (var i = 1u; i < p.c; i++) { m = max(m, fa[base + i]); }
  var s = 0.0;
  for (var i = 0u; i < p.c; i++) { s += exp(fa[base + i] - m); }
  for (var i = 0u; i < p.c; i++) { fout[base + i] = exp(fa[base + i] - m) / s; }
}

// fout += p ∘ (dp − ⟨p, dp⟩), fa = p, fb = dp
@compute @workgroup_size(64)
fn softmax_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let r = index(gid, groups);
  if (r >= p.n) { return; }
  let base = r * p.c;
  var d = 0.0;
  for (var i = 0u; i < p.c; i++) { d += fa[base + i] * fb[base + i]; }
  for (var i = 0u; i < p.c; i++) { fout[base + i] += fa[base + i] * (fb[base + i] - d); }
}

// iout[n·k + j] = the j-th most probable expert of row n of fa (p.c = E)
@compute @workgroup_size(64)
fn topk(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let r = index(gid, groups);
  if (r >= p.n) { return; }
  let base = r * p.c;
  for (var j = 0u; j < p.k; j++) {
    var best = -1;
    var bv = -3.0e38;
    for (var e = 0u; e < p.c; e++) {
      var taken = false;
      for (var q = 0u; q < j; q++) { taken = taken || iout[r * p.k + q] == i32(e); }
      if (!taken && (best < 0 || fa[base + e] > bv)) {
        best = i32(e);
        bv = fa[base + e];
      }
    }
    iout[r * p.k + j] = best;
  }
}

// fout[n·k+j] = p[n, top_j] (/ Σ_j p[n, top_j] when renormalising); fa = p, ia = top
@compute @workgroup_size(64)
fn gates_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let r = index(gid, groups);
  if (r >= p.n) { return; }
  var s = 0.0;
  for (var j = 0u; j < p.k; j++) { s += fa[r * p.c + u32(ia[r * p.k + j])]; }
  if (!flag(2u)) { s = 1.0; }
  for (var j = 0u; j < p.k; j++) { fout[r * p.k + j] = fa[r * p.c + u32(ia[r * p.k + j])] / s; }
}

// fout (dp) += ∂gates/∂p · fb (dgates): dg_j without renormalisation, else dg_j/s − ⟨dg, p_top⟩/s²
@compute @workgroup_size(64)
fn gates_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let r = index(gid, groups);
  if (r >= p.n) { return; }
  var s = 0.0;
  var q = 0.0;
  for (var j = 0u; j < p.k; j++) {
    let pj = fa[r * p.c + u32(ia[r * p.k + j])];
    s += pj;
    q += pj * fb[r * p.k + j];
  }
  for (var j = 0u; j < p.k; j++) {
    let at = r * p.c + u32(ia[r * p.k + j]);
    let dg = fb[r * p.k + j];
    if (flag(2u)) {
      fout[at] += dg / s - q / (s * s);
    } else {
      fout[at] += dg;
    }
  }
}

// iout[i] = −1 for i < n
@compute @workgroup_size(64)
fn fill_i32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n) { return; }
  iout[i] = -1;
}

// One invocation per (group g, expert e) over tokens [n0, n1) ∩ group g, choice p.j:
// ia = top (N·k), iout = slot (N·k; −1 when dropped), iout2 = slot → n·k+j,
// icnt = [fill (G·E), top-1 load (G·E)] carried between dispatches.
@compute @workgroup_size(64)
fn assign(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let t = index(gid, groups);
  let ng = p.n / p.gs;
  if (t >= ng * p.e) { return; }
  let g = t / p.e;
  let e = t % p.e;
  let lo = max(p.n0, g * p.gs);
  let hi = min(p.n1, (g + 1u) * p.gs);
  var fill = icnt[t];
  var load = icnt[ng * p.e + t];
  for (var n = lo; n < hi; n++) {
    let q = n * p.k + p.j;
    if (ia[q] == i32(e)) {
      if (p.j == 0u) { load += 1; }
      if (u32(fill) < p.cap) {
        let s = e * p.rows + g * p.cap + u32(fill);
        iout[q] = i32(s);
        iout2[s] = i32(q);
        fill += 1;
      } else {
        iout[q] = -1;
      }
    }
  }
  icnt[t] = fill;
  icnt[ng * p.e + t] = load;
}

// fout (n rows × c) (+)= w[idx[s]] · fa[idx[s] / k] (0 where idx < 0); ia = idx, fb = w, p.k = div
@compute @workgroup_size(64)
fn gather_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n * p.c) { return; }
  let s = i / p.c;
  let col = i % p.c;
  let q = ia[s];
  var v = 0.0;
  if (q >= 0) {
    v = fa[(u32(q) / p.k) * p.c + col];
    if (flag(1u)) { v *= fb[u32(q)]; }
  }
  if (flag(0u)) { fout[i] += v; } else { fout[i] = v; }
}

// fout (n × c) (+)= Σ_j w[n·k+j] · fa[idx[n·k+j]]; ia = idx (N·k), fb = w
@compute @workgroup_size(64)
fn gather_sum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n * p.c) { return; }
  let r = i / p.c;
  let col = i % p.c;
  var acc = 0.0;
  for (var j = 0u; j < p.k; j++) {
    let q = r * p.k + j;
    let s = ia[q];
    if (s >= 0) {
      var v = fa[u32(s) * p.c + col];
      if (flag(1u)) { v *= fb[q]; }
      acc += v;
    }
  }
  if (flag(0u)) { fout[i] += acc; } else { fout[i] = acc; }
}

// fout[n·k+j] (+)= ⟨fa[n], fb[idx[n·k+j]]⟩ (0 where idx < 0); one invocation per (n, j)
@compute @workgroup_size(64)
fn row_dots(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let q = index(gid, groups);
  if (q >= p.n * p.k) { return; }
  let r = q / p.k;
  let s = ia[q];
  var acc = 0.0;
  if (s >= 0) {
    for (var col = 0u; col < p.c; col++) { acc += fa[r * p.c + col] * fb[u32(s) * p.c + col]; }
  }
  if (flag(0u)) { fout[q] += acc; } else { fout[q] = acc; }
}

// fout[g·E+e] += Σ_{n ∈ [n0, n1) ∩ group g} fa[n·E + e]
@compute @workgroup_size(64)
fn group_colsum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let t = index(gid, groups);
  let ng = p.n / p.gs;
  if (t >= ng * p.e) { return; }
  let g = t / p.e;
  let e = t % p.e;
  let lo = max(p.n0, g * p.gs);
  let hi = min(p.n1, (g + 1u) * p.gs);
  var acc = 0.0;
  for (var n = lo; n < hi; n++) { acc += fa[n * p.e + e]; }
  fout[t] += acc;
}

// fout (3) = [fb[0] + aux, fb[1], fb[2]? + aux]; aux = alpha · Σ_{g,e} load[g,e] · colsum[g,e]
// with alpha = α·E/(G·gs²) folded in on the host; fa = colsum, ia = icnt
@compute @workgroup_size(64)
fn aux_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  if (index(gid, groups) != 0u) { return; }
  let ge = (p.n / p.gs) * p.e;
  var aux = 0.0;
  for (var t = 0u; t < ge; t++) { aux += f32(ia[ge + t]) * fa[t]; }
  aux *= p.alpha;
  var prev = 0.0;
  if (flag(3u)) { prev = fb[2]; }
  fout[0] = fb[0] + aux;
  fout[1] = fb[1];
  fout[2] = prev + aux;
}

// fout[n·E+e] += alpha · load[g(n), e], alpha = gradScale·α·E/(G·gs²); ia = icnt
@compute @workgroup_size(64)
fn aux_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = index(gid, groups);
  if (i >= p.n * p.e) { return; }
  let ge = (p.n / p.gs) * p.e;
  let r = i / p.e;
  let e = i % p.e;
  fout[i] += p.alpha * f32(ia[ge + (r / p.gs) * p.e + e]);
}
