// RMSNorm over the last dimension (Zhang & Sennrich, arXiv 1910.07467; the norm of Mamba's
// blocks, state-spaces/mamba `mamba_ssm/ops/triton/layer_norm.py` rms_norm_ref):
//   rstd = 1/sqrt(Σx²/C + eps),  xhat = x·rstd,  y = xhat·w
//   dx += rstd·(w·dy − xhat·mean_c(w·dy·xhat)),  dw += Σ_rows dy·xhat
// No mean is subtracted, so unlike LayerNorm the gradient has no mean_c(w·dy) term.
//
// Same layout as layernorm.wgsl: row kernels (forward, bwd_dx) share a row between LANES
// invocations that reduce it with row_reduce.wgsl (LANES = 1 on CPU adapters: no barriers);
// dw is a sum over all rows, so with no float atomics it is partial sums over chunks of rows
// (bwd_partial) that reduce.wgsl's colsum adds into dw.
//
// Bindings (holes per entry point are left by the TS side):
//   0 x (N,C)   1 w (C)   2 y (N,C) out   3 rstd (N) out   4 dy (N,C)   5 dx (N,C) +=
//   6 part (chunks, C) out   7 params

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
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;
@group(0) @binding(6) var<storage, read_write> part: array<f32>;
@group(0) @binding(7) var<uniform> p: Params;

//!include row_reduce
//!include col_chunks

@compute @workgroup_size(WG)
fn forward(at: RowLane, wg: RowGroup) {
  let row = (wg.wid.x + wg.wid.y * wg.groups.x) * ROWS + at.lid / LANES;
  let lane = at.lid % LANES;
  let live = row < p.n;
  let c = p.c;
  let base = row * c;
  // Σx² has no cancellation (all terms ≥ 0), so one pass needs no shift as LayerNorm does.
  var acc = 0.0;
  if (live) {
    for (var i = lane; i < c; i += LANES) {
      let v = x[base + i];
      acc += v * v;
    }
  }
  let r = inverseSqrt(row_sum(at, wg, acc, LANES) / f32(c) + p.eps);
  if (live) {
    for (var i = lane; i < c; i += LANES) {
      y[base + i] = x[base + i] * r * w[i];
    }
    if (lane == 0u) {
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
  var r = 0.0;
  var acc = 0.0;
  if (live) {
    r = rstd[row];
    for (var i = lane; i < c; i += LANES) {
      acc += w[i] * dy[base + i] * x[base + i] * r;
    }
  }
  let m = row_sum(at, wg, acc, LANES) / f32(c);
  if (live) {
    for (var i = lane; i < c; i += LANES) {
      let xhat = x[base + i] * r;
      dx[base + i] += (w[i] * dy[base + i] - xhat * m) * r;
    }
  }
}

// part[k][col] = Σ_{rows of chunk k} dy·xhat; reduce.wgsl's colsum then adds Σ_k part into dw.
@compute @workgroup_size(COL_WG)
fn bwd_partial(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let c = p.c;
  let cc = chunk_column(gid, groups, p.n, c, p.chunk);
  if (!cc.live) { return; }
  var s = 0.0;
  for (var r = cc.r0; r < cc.r1; r++) {
    s += dy[r * c + cc.col] * x[r * c + cc.col] * rstd[r];
  }
  part[cc.i] = s;
}
