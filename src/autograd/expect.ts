/** The ops' shape checks (ops.ts, activation_ops.ts): a wrong wiring fails with a message, not a GPU validation error. */

/** @throws Error with `msg()` unless `cond`. */
export function expect(cond: boolean, msg: () => string): void {
  if (!cond) throw new Error(msg());
}
