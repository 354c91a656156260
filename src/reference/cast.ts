/** f64 reference of the bf16 rounding kernel (docs/design.md#kernel-references-and-test-cases test standard). */

/** bfloat16's largest finite value, (2 − 2⁻⁷)·2¹²⁷. */
export const BF16_MAX = (2 - 2 ** -7) * 2 ** 127;

/**
 * Each value rounded to the nearest bfloat16 (8 mantissa bits with the implicit one, f32's
 * exponent range, subnormals down to 2⁻¹³³), ties to even; past {@link BF16_MAX} ±inf; NaN
 * stays NaN. Computed arithmetically (scale to an integer and round), not with the kernel's bit trick.
 */
export function bf16RoundRef(x: Float64Array): Float64Array {
  return x.map((v) => {
    if (!Number.isFinite(v) || v === 0) return v;
    const a = Math.abs(v);
    let e = Math.floor(Math.log2(a));
    if (2 ** e > a) e--;
    if (2 ** (e + 1) <= a) e++;
    const ulp = 2 ** (Math.max(e, -126) - 7);
    const q = a / ulp, f = Math.floor(q);
    const r = q - f > 0.5 || (q - f === 0.5 && f % 2 === 1) ? f + 1 : f;
    const out = r * ulp;
    return Math.sign(v) * (out > BF16_MAX ? Infinity : out);
  });
}
