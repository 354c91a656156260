/**
 * A plan's traffic under its compression policy (docs/design.md#compressed-collectives-and-the-per-dimension-policy):
 * cost.ts's rows of bulk traffic rewritten as the word-level calls compressed.ts runs, so predicted words equal the
 * trace key by key — a compressed allReduce becomes an allToAll (direct) and an allGather (ring) of p compressed
 * chunks, a reduceScatter the first, an allGather the second, an allToAll one allToAll of compressed chunks, a send one
 * message of the scheme's words; PowerSGD's dp sync two ring allReduces (P; Q with the uncompressed rest). Rows outside
 * the policy's reach (scalars, the cross-entropy's statistics, the tied embedding's and replicated parameters' sums)
 * pass through unchanged.
 */
import {
  compresses,
  type CompressPolicy,
  formatScheme,
  type GradMatrix,
  powerSgdCompresses,
  powerSgdWords,
  schemeWords,
} from '../../comm/compression.ts';
import { type CompressedCall, compressedPhases, phaseAlgorithm, phaseTraffic } from '../../comm/compressed_cost.ts';
import type { CommRow } from './cost.ts';

/** A rank's gradient matrices, packed as the gradient sync packs them (dense; experts under ep). */
export interface RankGradMatrices {
  dense: readonly GradMatrix[];
  expert?: readonly GradMatrix[];
}

/**
 * `rows` of rank `rank` under `policy`: bulk rows as the compressed calls' word-level rows (module
 * doc), with `scheme` set; everything else as given. No policy (or all none): `rows` itself.
 * @param matrices for dp=powersgd: this rank's gradient matrices; absent, its rows are inexact.
 */
export function compressRows(
  rows: CommRow[],
  policy: CompressPolicy | undefined,
  rank: number,
  matrices?: RankGradMatrices,
): CommRow[] {
  if (!compresses(policy)) return rows;
  return rows.flatMap((r) => {
    const s = r.bulk ? policy![r.dim] : undefined;
    if (!s || s.kind === 'none') return [r];
    const scheme = formatScheme(s), me = r.group.indexOf(rank), p = r.group.length;
    const row = (what: string, coll: CompressedCall, n: number): CommRow => {
      const tr = phaseTraffic([coll, n], p, me);
      const how = coll === 'send' ? {} : { collective: coll, algorithm: phaseAlgorithm(coll) };
      return { ...r, ...how, what, n, elements: tr.elements * r.calls, messages: tr.messages * r.calls, scheme };
    };
    if (s.kind === 'powersgd') {
      const list = r.bulk === 'act' ? undefined : matrices?.[r.bulk!];
      if (!list) return [{ ...r, what: `${r.what} (PowerSGD: matrix shapes not given)`, exact: false, scheme }];
      const ms = list.filter((m) => powerSgdCompresses(m.rows, m.cols, s.rank));
      const rest = r.n - ms.reduce((a, m) => a + m.rows * m.cols, 0), w = powerSgdWords(ms, s.rank, rest);
      return [
        row(`${r.what}: PowerSGD P`, 'allReduce', w.p),
        row(`${r.what}: PowerSGD Q + uncompressed rest`, 'allReduce', w.q),
      ];
    }
    const call = r.collective as CompressedCall;
    if (call === 'send') return [row(`${r.what}, ${scheme}`, 'send', schemeWords(s, r.n))];
    return compressedPhases(call, s, r.n, p).map(([c, w]) =>
      row(`${r.what}, ${scheme}${c === call ? '' : ` (${c} of compressed chunks)`}`, c, w)
    );
  });
}
