// The passes around matmul.wgsl's `main` (included at its end, so they share its parameters
// and bindings): `reduce_splits` folds split-K partial sums into C with alpha, beta and the bias,
// and `pad_cols` copies an operand whose row length is not a multiple of 4 into zero-padded rows,
// so `main` only ever loads aligned vec4s.

// 2D grid of WG_1D-wide workgroups over a flat index (src/kernels/grid.ts).
fn flat_index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
  return gid.x + gid.y * groups.x * WG_1D;
}

// C = alpha · Σ_z partial[z] + beta · C (+ bias). Partials (bound as `a`) hold M rows of ldc
// columns, split z at element z · mn_pad; one invocation per 4 columns of a row. C is loaded
// unconditionally (clamped, in bounds) and dropped by a select when beta == 0, since a fresh
// pool buffer may hold NaNs. The bias is added here, once, never to the partials.
@compute @workgroup_size(WG_1D)
fn reduce_splits(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i4 = flat_index(gid, groups);
  let row_len4 = p.ldc / 4u;
  if (i4 >= p.m * row_len4) {
    return;
  }
  var s = vec4<f32>(0.0);
  let stride4 = p.mn_pad / 4u;
  for (var z = 0u; z < p.splits; z++) {
    s += a[z * stride4 + i4];
  }
  let row = i4 / row_len4;
  let col = (i4 % row_len4) * 4u;
  let e = row * p.n + col;
  if (p.n % 4u == 0u) {
    // Rows of C are vec4-aligned: one vec4 load and store.
    var v = p.alpha * s + select(vec4<f32>(0.0), p.beta * c[e >> 2u], p.beta != 0.0);
    if (p.has_bias != 0u) {
      v += bias[col >> 2u];
    }
    c[e >> 2u] = v;
    return;
  }
  let last = p.m * p.n - 1u;
  for (var t = 0u; t < 4u; t++) {
    let i = min(e + t, last);
    let old = c[i >> 2u][i & 3u];
    var v = p.alpha * s[t] + select(0.0, p.beta * old, p.beta != 0.0);
    if (p.has_bias != 0u) {
      let j = min(col + t, p.n - 1u);
      v += bias[j >> 2u][j & 3u];
    }
    if (col + t < p.n) {
      c[i >> 2u][i & 3u] = v;
    }
  }
}

// Copies a (rows × cols) matrix into c (rows × ldc), ldc = cols rounded up to 4, zero-filling
// the padding; one invocation per output vec4. Params: m = rows, n = cols, ldc.
@compute @workgroup_size(WG_1D)
fn pad_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i4 = flat_index(gid, groups);
  let row_len4 = p.ldc / 4u;
  if (i4 >= p.m * row_len4) {
    return;
  }
  let row = i4 / row_len4;
  let col = (i4 % row_len4) * 4u;
  let last = p.m * p.n - 1u;
  var v = vec4<f32>(0.0);
  for (var t = 0u; t < 4u; t++) {
    let i = min(row * p.n + col + t, last);
    v[t] = select(0.0, a[i >> 2u][i & 3u], col + t < p.n);
  }
  c[i4] = v;
}
