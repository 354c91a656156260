/**
 * `npm run trace -- summary <run dir | trace.json>`: the communication characterisation of a
 * parallel run (src/perf/trace_summary.ts) — message sizes per collective and per parallel
 * dimension, the share of messages, bytes and simulated time under 64 KiB, and each rank's bytes
 * per step by `dim/collective` beside accounting.json's prediction when the run folder has one.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { dirname } from 'node:path';
import { binLabel, SIZE_EDGES, type SizeHistogram, summarizeTrace } from '../perf/trace_summary.ts';
import { fmtBytes, fmtInt, pct, table } from '../perf/plan_report.ts';
import { runCli } from './main.ts';

const HELP = `Usage: npm run trace -- summary <run dir | trace.json>

Message-size histograms per collective and per parallel dimension of a parallel run's trace
(sends inside training steps), the share of messages under 64 KiB, and bytes per step and rank
beside the prediction in accounting.json (when the run folder has one).`;

/** One histogram table: a row per key, a column per size bin (message counts), then bytes and sim time. */
function histogramTable(title: string, head: string, m: Map<string, SizeHistogram>): string {
  const bins = [...Array(SIZE_EDGES.length + 1).keys()];
  const rows = [...m].sort(([a], [b]) => a.localeCompare(b)).map(([k, h]) => [
    k,
    ...bins.map((b) => fmtInt(h.count[b])),
    fmtBytes(h.bytes.reduce((a, v) => a + v, 0)),
    (h.simUs.reduce((a, v) => a + v, 0) / 1000).toFixed(3),
  ]);
  return `${title}\n${table([head, ...bins.map(binLabel), 'bytes', 'sim ms'], rows)}`;
}

/** Prediction per rank and `dim/collective`, in elements, from accounting.json (null when absent). */
async function predictions(path: string): Promise<Map<number, Record<string, number>> | null> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch {
    return null;
  }
  const acc = JSON.parse(text) as { ranks?: { rank: number; traffic: { key: string; predicted: number }[] }[] };
  if (!Array.isArray(acc.ranks)) throw new Error(`${path}: no ranks array (expected a parallel run's accounting.json)`);
  return new Map(acc.ranks.map((r) => [r.rank, Object.fromEntries(r.traffic.map((t) => [t.key, t.predicted]))]));
}

/**
 * Runs the CLI and returns the text it printed.
 * @throws Error for a missing subcommand or path, an unreadable trace, or a malformed accounting.json.
 */
export async function main(argv: string[]): Promise<string | null> {
  const { values, positionals } = parseCliArgs({
    args: argv,
    options: { help: { type: 'boolean', short: 'h' } },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(HELP);
    return null;
  }
  if (positionals[0] !== 'summary' || positionals.length !== 2) {
    throw new Error(`expected 'summary <run dir | trace.json>', got '${positionals.join(' ')}' (see --help)`);
  }
  let path = positionals[1];
  if ((await Deno.stat(path)).isDirectory) path = `${path}/trace.json`;
  const s = summarizeTrace(JSON.parse(await Deno.readTextFile(path)));
  const predicted = await predictions(`${dirname(path)}/accounting.json`);
  const out = [
    `${path}: ${s.steps} steps; messages sent inside steps, by size`,
    '',
    histogramTable('messages per collective', 'collective', s.byCollective),
    '',
    histogramTable('messages per dimension', 'dim', s.byDim),
    '',
    `under 64 KiB: ${pct(s.small.count)} of messages, ${pct(s.small.bytes)} of bytes, ` +
    (Number.isNaN(s.small.time)
      ? 'no simulated time (the run had no --net)'
      : `${pct(s.small.time)} of simulated time`),
    '',
    `bytes per step and rank by dim/collective${predicted ? ", beside accounting.json's prediction" : ''}:`,
    table(
      ['rank', 'dim/collective', 'measured', ...(predicted ? ['predicted'] : [])],
      [...s.bytesPerStep].sort(([a], [b]) => a - b).flatMap(([rank, m]) =>
        Object.entries(m).sort().map(([k, b]) => [
          rank,
          k,
          fmtBytes(b),
          ...(predicted ? [fmtBytes(4 * (predicted.get(rank)?.[k] ?? 0))] : []),
        ])
      ),
    ),
  ].join('\n');
  console.log(out);
  return out;
}

if (import.meta.main) await runCli(main);
