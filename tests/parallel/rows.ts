/**
 * Records the token rows a model trains on. Imports nothing that reads files at load time, so
 * the dp worker can bundle it.
 */
import type { LanguageModel } from '../../src/models/model.ts';

/**
 * Wraps `model.forward` to keep the host tokens of every training forward (those with a
 * gradient scale; evaluation passes none): one flat (b·T) array per micro-batch, in call order.
 */
export function recordRows(model: LanguageModel): number[][] {
  const seen: number[][] = [];
  const forward = model.forward.bind(model);
  model.forward = (tape, tokens, host, targets, b, t, opts) => {
    if (opts?.gradScale !== undefined) seen.push(Array.from(host.subarray(0, b * t)));
    return forward(tape, tokens, host, targets, b, t, opts);
  };
  return seen;
}

/**
 * Matches every rank's rows (length-t slices of `ranks[r]`) to rows of `global`, each global row
 * used once: the global row indices each rank drew.
 * @throws Error when a rank draws a row the global batch does not hold (or holds fewer times),
 *   or when some global row is drawn by no rank.
 */
export function partitionRows(global: number[], ranks: number[][], t: number): number[][] {
  const key = (a: number[], i: number) => a.slice(i * t, (i + 1) * t).join(',');
  const free = new Map<string, number[]>();
  for (let i = 0; i < global.length / t; i++) free.set(key(global, i), [...(free.get(key(global, i)) ?? []), i]);
  const drawn = ranks.map((rows, r) =>
    Array.from({ length: rows.length / t }, (_, j) => {
      const i = free.get(key(rows, j))?.shift();
      if (i === undefined) {
        throw new Error(`rank ${r} row ${j} is not a global row left undrawn by the ranks before it`);
      }
      return i;
    })
  );
  const left = [...free.values()].flat();
  if (left.length) throw new Error(`global rows ${left.sort((a, b) => a - b)} are drawn by no rank`);
  return drawn;
}
