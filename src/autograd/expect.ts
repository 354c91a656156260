/** The ops' checks (ops.ts, activation_ops.ts, mixer_ops.ts): a wrong wiring fails with a message, not a GPU validation error. */

/** @throws Error with `msg()` unless `cond`. */
export function expect(cond: boolean, msg: () => string): void {
  if (!cond) throw new Error(msg());
}

/**
 * @throws Error when a carried decoding state (docs/design.md#decoding-state-of-the-recurrent-layers) meets a recording
 * tape: the
 *   decoding forms of the ops have no gradient.
 */
export function expectInference(tape: { recording: boolean }, label: string): void {
  expect(!tape.recording, () => `${label}: a carried decoding state runs on non-recording tapes only (no gradient)`);
}
