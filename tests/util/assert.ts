/** Numeric assertions with the tolerances of docs/design.md#test-tolerances. */

/** Deterministic PRNG (mulberry32) so every test input is reproducible. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n values uniform in [lo, hi), as f64 (exactly representable in f32). */
export function randn(n: number, seed: number, lo = -1, hi = 1): Float64Array {
  const r = rng(seed);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.fround(lo + (hi - lo) * r());
  return out;
}

/**
 * Elementwise |a − ref| ≤ atol + rtol·|ref| (defaults: 1e-4 + 1e-3·|ref|, docs/design.md#test-tolerances).
 * @throws Error naming the first failing index, both values and the count of failures.
 */
export function assertClose(
  actual: ArrayLike<number>,
  ref: ArrayLike<number>,
  what: string,
  atol = 1e-4,
  rtol = 1e-3,
): void {
  if (actual.length !== ref.length) throw new Error(`${what}: length ${actual.length} vs reference ${ref.length}`);
  let bad = 0;
  let first = -1;
  for (let i = 0; i < ref.length; i++) {
    const ok = Math.abs(actual[i] - ref[i]) <= atol + rtol * Math.abs(ref[i]);
    if (!ok || Number.isNaN(actual[i])) {
      if (first < 0) first = i;
      bad++;
    }
  }
  if (bad) {
    throw new Error(
      `${what}: ${bad}/${ref.length} elements off; first at ${first}: got ${actual[first]}, reference ${ref[first]}`,
    );
  }
}

/** RMS(a − ref) / RMS(ref) < tol (docs/design.md#test-tolerances: 5e-3 for gradients). */
export function assertRelRms(actual: ArrayLike<number>, ref: ArrayLike<number>, what: string, tol = 5e-3): void {
  if (actual.length !== ref.length) throw new Error(`${what}: length ${actual.length} vs reference ${ref.length}`);
  let e = 0;
  let r = 0;
  for (let i = 0; i < ref.length; i++) {
    e += (actual[i] - ref[i]) ** 2;
    r += ref[i] ** 2;
  }
  const rel = Math.sqrt(e / Math.max(r, 1e-300));
  if (!(rel < tol)) throw new Error(`${what}: relative RMS error ${rel.toExponential(3)} ≥ ${tol}`);
}

/**
 * Checks an f64 reference gradient by central finite differences of the scalar
 * loss(x) at up to `samples` coordinates: |fd − analytic| / max(|fd|, |analytic|, floor) < tol.
 */
export function assertFiniteDiff(
  loss: (x: Float64Array) => number,
  x: Float64Array,
  analytic: Float64Array,
  what: string,
  { h = 1e-5, tol = 1e-6, samples = 40, floor = 1e-3 } = {},
): void {
  const step = Math.max(1, Math.floor(x.length / samples));
  for (let i = 0; i < x.length; i += step) {
    const keep = x[i];
    x[i] = keep + h;
    const up = loss(x);
    x[i] = keep - h;
    const down = loss(x);
    x[i] = keep;
    const fd = (up - down) / (2 * h);
    const err = Math.abs(fd - analytic[i]) / Math.max(Math.abs(fd), Math.abs(analytic[i]), floor);
    if (!(err < tol)) {
      throw new Error(
        `${what}: finite difference ${fd} vs analytic ${analytic[i]} at ${i} (rel err ${err.toExponential(2)})`,
      );
    }
  }
}

/** Σ a·w, the random projection that turns an output into a scalar loss for gradient checks. */
export function dot(a: ArrayLike<number>, w: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * w[i];
  return s;
}

/** Float64Array copy of a GPU read-back. */
export function f64(a: ArrayLike<number>): Float64Array {
  return Float64Array.from(a);
}

/** Asserts that `fn` throws an Error whose message contains `part`. */
export function assertThrows(fn: () => unknown, part: string): void {
  try {
    fn();
  } catch (e) {
    if (!(e as Error).message.includes(part)) {
      throw new Error(`expected an error containing '${part}', got '${(e as Error).message}'`);
    }
    return;
  }
  throw new Error(`expected an error containing '${part}', nothing was thrown`);
}
