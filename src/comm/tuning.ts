/**
 * The backend tuning table (MCR-DL, arXiv 2303.08374: pick the faster backend per collective and
 * message size, measured on the machine; docs/design.md#two-backends-per-call-mcr-dl). `npm run bench -- comm
 * --transport mpi --tune FILE` measures this project's algorithms and MPI's own collectives per (collective, group
 * size, message size) and writes, for each, the faster backend (and, for ours, the faster algorithm). A communicator
 * whose backend is `auto` looks every call up here.
 */
import { z } from 'zod';
import type { Algorithm, Backend } from './call_options.ts';
import { zodIssues } from '../util/digest.ts';

const Entry = z.strictObject({
  coll: z.enum(['allReduce', 'reduceScatter', 'allGather', 'broadcast', 'reduce', 'allToAll']),
  /** Group size p the entry was measured on. */
  p: z.number().int().min(1),
  /** Message size S (bytes) measured; the entry serves calls up to this size. */
  bytes: z.number().int().min(0),
  backend: z.enum(['ours', 'mpi']),
  /** With backend `ours`: the fastest algorithm. */
  algorithm: z.string().optional(),
  /** Measured ms per call of each candidate (`mpi`, `ours/ring`, …), for the record. */
  ms: z.record(z.string(), z.number()),
});
export type TuningEntry = z.infer<typeof Entry>;

export const TuningTableSchema = z.strictObject({
  format: z.literal('webgpu-train-sandbox/comm-tuning/1'),
  date: z.string(),
  entries: z.array(Entry).min(1),
});
export type TuningTable = z.infer<typeof TuningTableSchema>;

/** One measured candidate: a backend (and algorithm) at one (collective, p, S). */
export interface Measured {
  coll: TuningEntry['coll'];
  p: number;
  bytes: number;
  backend: Backend;
  algorithm?: string;
  ms: number;
}

/** The table of the fastest candidate per (collective, p, S) among `rows`. */
export function buildTuning(rows: readonly Measured[], date = new Date().toISOString()): TuningTable {
  const by = new Map<string, Measured[]>();
  for (const r of rows) {
    const k = `${r.coll}|${r.p}|${r.bytes}`;
    by.set(k, [...(by.get(k) ?? []), r]);
  }
  const entries = [...by.values()].map((c) => {
    const best = c.reduce((a, b) => (b.ms < a.ms ? b : a));
    return {
      coll: best.coll,
      p: best.p,
      bytes: best.bytes,
      backend: best.backend,
      ...(best.backend === 'ours' ? { algorithm: best.algorithm } : {}),
      ms: Object.fromEntries(c.map((r) => [r.backend === 'mpi' ? 'mpi' : `ours/${r.algorithm}`, r.ms])),
    };
  });
  return { format: 'webgpu-train-sandbox/comm-tuning/1', date, entries };
}

/**
 * The table's choice for a call of `coll` on `bytes` over a group of `p`: among the entries of
 * that collective, the nearest group size, then the smallest measured S ≥ bytes (the largest S
 * past the end). Null when the table has no entry for `coll`.
 */
export function pickBackend(
  t: TuningTable,
  coll: string,
  bytes: number,
  p: number,
): { backend: Backend; algorithm?: Algorithm } | null {
  const mine = t.entries.filter((e) => e.coll === coll);
  if (!mine.length) return null;
  const near = Math.min(...mine.map((e) => Math.abs(e.p - p)));
  const atP = mine.filter((e) => Math.abs(e.p - p) === near).sort((a, b) => a.bytes - b.bytes);
  const e = atP.find((x) => x.bytes >= bytes) ?? atP[atP.length - 1];
  return { backend: e.backend, ...(e.algorithm ? { algorithm: e.algorithm as Algorithm } : {}) };
}

/**
 * Reads a tuning table written by the comm bench.
 * @throws Error naming the file and what is wrong with it.
 */
export function parseTuning(text: string, file: string): TuningTable {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`tuning table ${file}: not JSON (${(e as Error).message})`);
  }
  const r = TuningTableSchema.safeParse(raw);
  if (!r.success) throw new Error(`tuning table ${file}: ${zodIssues(r.error)}`);
  return r.data;
}
