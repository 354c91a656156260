/**
 * Goldfish loss (Hans et al., "Be like a Goldfish, Don't Memorize!", arXiv 2406.10209):
 * a pseudo-random 1/k of the target tokens is left out of the next-token loss, so the model
 * never sees the whole of any passage as a training signal and cannot reproduce it verbatim.
 * The paper's "hashed" mask decides each token from a hash of the h tokens before it, so a
 * passage that recurs (a duplicate document) drops the same tokens every time — a random
 * mask would drop different ones and, over many copies, leak the whole text.
 */
import { hash32, mixSeed } from '../util/random.ts';

/** Salt so the goldfish hash is unrelated to the batch sampler's use of the same hash. */
const SALT = 0x60_1d_f1_54;

/**
 * Whether the target that follows `context` (the h tokens before it) is dropped: a hash of
 * the context, mapped to [0, 1), falls below 1/k.
 */
export function goldfishDrops(context: ArrayLike<number>, k: number): boolean {
  let h = mixSeed(SALT, context.length);
  for (let i = 0; i < context.length; i++) h = hash32((h ^ hash32(context[i] >>> 0)) + 0x9e3779b9);
  return (h >>> 0) / 4294967296 < 1 / k;
}

/**
 * The goldfish-masked targets of a batch of rows of length `t`: targets[r·t + i] predicts the
 * token after inputs[r·t + i], so its preceding h tokens are inputs[r·t + i − h + 1 … r·t + i].
 * Dropped targets become −1, which the cross-entropy kernel ignores (the loss averages over
 * the rest). The first h − 1 targets of a row have no full context inside the window and are
 * always kept, as in the paper's implementation — hashing a shorter context would make the
 * decision depend on where the window starts.
 * @param k drop rate 1/k; 0 turns the mask off (the targets are returned as they are).
 * @param h context tokens hashed per decision (the paper's default is 13).
 * @returns a new array (or `targets` itself when k = 0).
 */
export function goldfishMask(targets: Int32Array, inputs: Int32Array, t: number, k: number, h: number): Int32Array {
  if (k === 0) return targets;
  if (k < 2 || !Number.isInteger(k)) throw new Error(`goldfish k must be 0 (off) or an integer ≥ 2, got ${k}`);
  if (h < 1 || !Number.isInteger(h)) throw new Error(`goldfish h must be a positive integer, got ${h}`);
  if (targets.length !== inputs.length || targets.length % t !== 0) {
    throw new Error(`goldfish: targets (${targets.length}) and inputs (${inputs.length}) must be whole rows of ${t}`);
  }
  const out = targets.slice();
  for (let row = 0; row < targets.length; row += t) {
    for (let i = h - 1; i < t; i++) {
      if (goldfishDrops(inputs.subarray(row + i - h + 1, row + i + 1), k)) out[row + i] = -1;
    }
  }
  return out;
}
