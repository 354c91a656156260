// LayerNorm over the last dimension (Ba et al., arXiv 1607.06450), following llm.c's
// layernorm_forward / layernorm_backward (train_gpt2.c):
//   mean = Σx/C,  rstd = 1/sqrt(Σ(x−mean)²/C + eps),  xhat = (x−mean)·rstd,  y = xhat·w + b
//   dx += rstd·(w·dy − mean_c(w·dy) − xhat·mean_c(w·dy·xhat)),  dw += Σ_rows dy·xhat,  db += Σ_rows dy
//
// Row kernels (forward, bwd_dx): LANES invocations share one row and reduce it with
// row_reduce.wgsl (workgroup memory, or subgroup operations where the device has them);
// a workgroup holds WG / LANES rows. LANES is specialised from C so short rows do not leave
// most of a workgroup idle. Workgroups form a 2D grid (row blocks beyond 65535 go to y):
// block = wid.x + wid.y · groups.x.
//
// dw/db are sums over all rows, shared by many workgroups; with no float atomics they are
// computed as partial sums over chunks of rows (bwd_partial, a grid that owns each
// (chunk, column)); reduce.wgsl's colsum, a pass that owns each column, adds them into dw, db.
//
// Bindings (holes per entry point are left by the TS side):
//   0 x (N,C)   1 w (C)   2 b (C)   3 y (N,C) out   4 mean (N)   5 rstd (N)
//   6 dy (N,C)  7 dx (N,C) +=   8 part_w (chunks, C) out   9 part_b (chunks, C) out   10 params

struct Params {
  n: u32,       // rows
  c: u32,       // columns
  eps: f32,
  chunk: u32,   // rows per partial-sum chunk (bwd_partial)
}

const LANES: u32 = 32u;  // invocations per row: a power of two dividing WG
const WG: u32 = 256u;
const ROWS: u32 = WG / LANES;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> mean: array<f32>;
@group(0) @binding(5) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(6) var<storage, read> dy: array<f32>;
@group(0) @binding(7) var<storage, read_write> dx: array<f32>;
@group(0) @binding(8) var<storage, read_write> part_w: array<f32>;
@group(0) @binding(9) var<storage, read_write> part_b: array<f32>;
@group(0) @binding(10) var<uniform> p: Params;

//!include row_reduce
//!include col_chunks

@compute @workgroup_size(WG)
fn forward(at: RowLane, wg: RowGroup) {
  let row = (wg.wid.x + wg.wid.y * wg.groups.x) * ROWS + at.lid / LANES;
  let lane = at.lid % LANES;
  let live = row < p.n;
  let c = p.c;
  let base = row * c;
  // One pass for both moments, shifted by the row's first element k: var = E[d²] − E[d]²
  // with d = x − k. Since (k − mean)² ≤ (C − 1)·var, rounding costs at most ~C·2⁻²⁴ of var
  // relative — unlike the unshifted Σx² − C·mean², which cancels when |mean| ≫ std — and
  // a pass fewer than mean-then-deviations, which matters on CPU adapters.
  var k = 0.0;
  var acc = vec2<f32>(0.0, 0.0);
  if (live) {
    k = x[base];
    for (var i = lane; i < c; i += LANES) {
      let d = x[base + i] - k;
      acc += vec2<f32>(d, d * d);
    }
  }
  let mom = row_sum2(at, wg, acc, LANES) / f32(c);
  let m = k + mom.x;
  let r = inverseSqrt(max(mom.y - mom.x * mom.x, 0.0) + p.eps);
  if (live) {
    for (var i = lane; i < c; i += LANES) {
      y[base + i] = (x[base + i] - m) * r * w[i] + b[i];
    }
    if (lane == 0u) {
      mean[row] = m;
      rstd[row] = r;
    }
  }
}

@compute @workgroup_size(WG)
fn bwd_dx(at: RowLane, wg: RowGroup) {
  let row = (wg.wid.x + wg.wid.y * wg.groups.x) * ROWS + at.lid / LANES;
  let lane = at.lid % LANES;
  let live = row < p.n;
  let c = p.c;
  let base = row * c;
  var m = 0.0;
  var r = 0.0;
  var acc = vec2<f32>(0.0, 0.0);
  if (live) {
    m = mean[row];
    r = rstd[row];
    for (var i = lane; i < c; i += LANES) {
      let g = w[i] * dy[base + i];
      acc += vec2<f32>(g, g * (x[base + i] - m) * r);
    }
  }
  let sums = row_sum2(at, wg, acc, LANES) / f32(c);
  if (live) {
    for (var i = lane; i < c; i += LANES) {
      let g = w[i] * dy[base + i];
      let xhat = (x[base + i] - m) * r;
      dx[base + i] += (g - sums.x - xhat * sums.y) * r;
    }
  }
}

// part_w[k][col] = Σ_{rows of chunk k} dy·xhat, part_b[k][col] = Σ dy; reduce.wgsl's colsum
// then adds Σ_k of each into dw and db.
@compute @workgroup_size(COL_WG)
fn bwd_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let c = p.c;
  let cc = chunk_column(gid, groups, p.n, c, p.chunk);
  if (!cc.live) { return; }
  var sw = 0.0;
  var sb = 0.0;
  for (var r = cc.r0; r < cc.r1; r++) {
    let g = dy[r * c + cc.col];
    sw += g * (x[r * c + cc.col] - mean[r]) * rstd[r];
    sb += g;
  }
  part_w[cc.i] = sw;
  part_b[cc.i] = sb;
}
