/**
 * f64 reference for the Mamba selective scan (Gu & Dao 2023, arXiv 2312.00752), forward and
 * backward, following state-spaces/mamba `selective_scan_ref` (docs/design.md#kernel-references-and-test-cases).
 * Test-only: it keeps every state h_t (B, T, D, N) in memory.
 *
 * Layouts as the GPU kernels (src/kernels/selective_scan.ts): u, delta, z, out (B, T, D);
 * Bm, Cm (B, T, N); A (D, N); Dskip, bias (D).
 */
import type { ScanDims } from '../kernels/selective_scan.ts';

/** Inputs of one scan; `z` null means no silu gate. */
export interface ScanInputs {
  u: Float64Array;
  delta: Float64Array;
  A: Float64Array;
  Bm: Float64Array;
  Cm: Float64Array;
  Dskip: Float64Array;
  bias: Float64Array;
  z: Float64Array | null;
}

/** Gradients of a scalar loss with respect to every input of {@link ScanInputs}. */
export interface ScanGrads {
  du: Float64Array;
  ddelta: Float64Array;
  dA: Float64Array;
  dB: Float64Array;
  dC: Float64Array;
  dD: Float64Array;
  dbias: Float64Array;
  dz: Float64Array | null;
}

/** softplus(x) = log(1 + eˣ), stable for large |x|. */
export function softplus(x: number): number {
  return Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x)));
}

/** Logistic sigmoid, the derivative of softplus. */
export function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

interface Trace {
  dt: Float64Array; // Δ (B, T, D)
  h: Float64Array; // h_t (B, T, D, N)
  y: Float64Array; // pre-gate output (B, T, D)
  out: Float64Array; // (B, T, D)
}

/** The scan from h₀ (B, D, N) (zero when null). */
function forward(x: ScanInputs, s: ScanDims, h0: Float64Array | null = null): Trace {
  const { b: nb, t: nt, d: nd, n: nn } = s;
  const dt = new Float64Array(nb * nt * nd);
  const h = new Float64Array(nb * nt * nd * nn);
  const y = new Float64Array(nb * nt * nd);
  const out = new Float64Array(nb * nt * nd);
  for (let b = 0; b < nb; b++) {
    for (let d = 0; d < nd; d++) {
      for (let t = 0; t < nt; t++) {
        const i = (b * nt + t) * nd + d;
        const bt = (b * nt + t) * nn;
        const del = softplus(x.delta[i] + x.bias[d]);
        dt[i] = del;
        let acc = x.Dskip[d] * x.u[i];
        for (let n = 0; n < nn; n++) {
          const prev = t > 0 ? h[i * nn - nd * nn + n] : h0 ? h0[(b * nd + d) * nn + n] : 0;
          const hv = Math.exp(del * x.A[d * nn + n]) * prev + del * x.Bm[bt + n] * x.u[i];
          h[i * nn + n] = hv;
          acc += x.Cm[bt + n] * hv;
        }
        y[i] = acc;
        out[i] = x.z ? acc * x.z[i] * sigmoid(x.z[i]) : acc;
      }
    }
  }
  return { dt, h, y, out };
}

/**
 * out (B, T, D): Δ = softplus(δ + bias), h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t (h_0 = 0),
 * y_t = C_t·h_t + D u_t, out = y · silu(z) (or y when z is null).
 */
export function selectiveScanRef(x: ScanInputs, s: ScanDims): Float64Array {
  return forward(x, s).out;
}

/**
 * The decoding form (docs/design.md#decoding-state-of-the-recurrent-layers): out (B, T, D) of the scan from h₀ (B, D,
 * N), and the state h_T (B, D, N) after its last step.
 */
export function selectiveStateUpdateRef(
  x: ScanInputs,
  s: ScanDims,
  h0: Float64Array,
): { out: Float64Array; h: Float64Array } {
  const { b: nb, t: nt, d: nd, n: nn } = s, tr = forward(x, s, h0), h = new Float64Array(nb * nd * nn);
  for (let b = 0; b < nb; b++) {
    for (let d = 0; d < nd; d++) {
      const last = ((b * nt + nt - 1) * nd + d) * nn;
      h.set(tr.h.subarray(last, last + nn), (b * nd + d) * nn);
    }
  }
  return { out: tr.out, h };
}

/**
 * Gradients of Σ dout ∘ out with respect to every input (docs/design.md#selective-scan):
 * dh_t = C_t g_t + Ā_{t+1} dh_{t+1} with g = dout·silu(z); du_t = D g_t + Σ_n dh_t Δ_t B_t;
 * dΔ_t = Σ_n dh_t (B_t u_t + A Ā_t h_{t−1}); dδ = dΔ σ(δ + bias); dA = Σ dh Δ Ā h_{t−1};
 * dB_t = Σ_d dh_t Δ_t u_t; dC_t = Σ_d g_t h_t; dD = Σ g u; dz = dout·y·silu′(z).
 */
export function selectiveScanBackwardRef(x: ScanInputs, dout: Float64Array, s: ScanDims): ScanGrads {
  const { b: nb, t: nt, d: nd, n: nn } = s;
  const tr = forward(x, s);
  const g: ScanGrads = {
    du: new Float64Array(nb * nt * nd),
    ddelta: new Float64Array(nb * nt * nd),
    dA: new Float64Array(nd * nn),
    dB: new Float64Array(nb * nt * nn),
    dC: new Float64Array(nb * nt * nn),
    dD: new Float64Array(nd),
    dbias: new Float64Array(nd),
    dz: x.z ? new Float64Array(nb * nt * nd) : null,
  };
  const dh = new Float64Array(nn);
  for (let b = 0; b < nb; b++) {
    for (let d = 0; d < nd; d++) {
      dh.fill(0); // holds Ā_{t+1} dh_{t+1} on entry to step t
      for (let t = nt - 1; t >= 0; t--) {
        const i = (b * nt + t) * nd + d;
        const bt = (b * nt + t) * nn;
        let gy = dout[i];
        if (x.z && g.dz) {
          const sg = sigmoid(x.z[i]);
          gy = dout[i] * x.z[i] * sg;
          g.dz[i] = dout[i] * tr.y[i] * sg * (1 + x.z[i] * (1 - sg));
        }
        const del = tr.dt[i];
        let du = x.Dskip[d] * gy;
        let ddt = 0;
        g.dD[d] += gy * x.u[i];
        for (let n = 0; n < nn; n++) {
          const a = x.A[d * nn + n];
          const decay = Math.exp(del * a);
          const prev = t > 0 ? tr.h[i * nn - nd * nn + n] : 0;
          const dhv = x.Cm[bt + n] * gy + dh[n];
          g.dC[bt + n] += gy * tr.h[i * nn + n];
          g.dB[bt + n] += dhv * del * x.u[i];
          du += dhv * del * x.Bm[bt + n];
          ddt += dhv * (x.Bm[bt + n] * x.u[i] + a * decay * prev);
          g.dA[d * nn + n] += dhv * del * decay * prev;
          dh[n] = decay * dhv;
        }
        g.du[i] = du;
        const dd = ddt * sigmoid(x.delta[i] + x.bias[d]);
        g.ddelta[i] = dd;
        g.dbias[d] += dd;
      }
    }
  }
  return g;
}
