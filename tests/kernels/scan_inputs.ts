/** Random selective-scan inputs shared by the scan's kernel tests (full and decoding forms). */
import { randn } from '../util/assert.ts';
import type { ScanDims } from '../../src/kernels/selective_scan.ts';
import type { ScanInputs } from '../../src/reference/selective_scan.ts';

/**
 * Random inputs. `strong` decays: A ∈ [−8, −2] and Δ around 1–3, so Ā = exp(ΔA) is often below
 * e⁻⁴ and the state forgets within a few steps; weak: A ∈ [−0.05, −0.005], memory of hundreds.
 */
export function scanInputs(s: ScanDims, seed: number, gated: boolean, strong: boolean): ScanInputs {
  const btd = s.b * s.t * s.d, btn = s.b * s.t * s.n;
  return {
    u: randn(btd, seed),
    delta: strong ? randn(btd, seed + 1, 0, 2) : randn(btd, seed + 1, -2, 0.5),
    A: strong ? randn(s.d * s.n, seed + 2, -8, -2) : randn(s.d * s.n, seed + 2, -0.05, -0.005),
    Bm: randn(btn, seed + 3),
    Cm: randn(btn, seed + 4),
    Dskip: randn(s.d, seed + 5),
    bias: randn(s.d, seed + 6, -1, 0.5),
    z: gated ? randn(btd, seed + 7, -2, 2) : null,
  };
}
