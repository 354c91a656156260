/**
 * What the Timeline says of a low-communication run's outer synchronisation (`--sync`,
 * docs/design.md#low-communication-data-parallelism): its calls are the spans on a `…/outer` group (outer_sync.ts), one
 * call per (rank, group, seq); a call whose spans fall in a later optimizer step than its first overlapped inner steps.
 */
import type { Span } from '../../comm/trace.ts';

/** Outer calls in `spans`, how many ran on into later steps and the bytes they sent; null when the run has none. */
export function outerSyncStats(
  spans: readonly Span[],
): { calls: number; overlapped: number; groups: string[]; bytes: number } | null {
  const calls = new Map<string, { first: number; last: number }>(), groups = new Set<string>();
  let bytes = 0;
  for (const s of spans) {
    if (!s.group.endsWith('/outer') || s.seq === undefined || s.step === undefined) continue;
    groups.add(s.group);
    if (s.kind === 'send') bytes += s.bytes;
    const key = `${s.rank} ${s.group} ${s.seq}`, c = calls.get(key);
    calls.set(key, c ? { first: Math.min(c.first, s.step), last: Math.max(c.last, s.step) } : { first: s.step, last: s.step });
  }
  if (!calls.size) return null;
  const overlapped = [...calls.values()].filter((c) => c.last > c.first).length;
  return { calls: calls.size, overlapped, groups: [...groups].sort(), bytes };
}

/** The Timeline summary's sentence for {@link outerSyncStats} (empty without outer calls). */
export function outerSyncLine(spans: readonly Span[]): string {
  const o = outerSyncStats(spans);
  if (!o) return '';
  return ` · outer synchronisation: ${o.calls} calls on ${o.groups.join(', ')}, ${o.overlapped} overlapping later inner steps`;
}
