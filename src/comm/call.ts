/**
 * How one collective call of a {@link Communicator} runs (docs/design.md#ranks-and-the-collective-layer and
 * docs/design.md#two-backends-per-call-mcr-dl): this project's algorithm over the call's Link (link.ts), or, under
 * backend `mpi`, the wire library's own collective (MPI_Allreduce …, MCR-DL's per-call mixing). Either way the call
 * takes the group's next sequence number, so every rank stays in step whichever backend each call used, and the call is
 * recorded as one `collective` span. A native call's messages are MPI's own: they leave no send / recv spans and do not
 * move the simulated clock.
 */
import type { Communicator } from './communicator.ts';
import { callLink, nextSeq, peekSeq } from './link.ts';
import type { Link, NumArray, ReduceOp } from './algorithms.ts';
import { algorithmOf, wallMs } from './trace.ts';
import type { Backend } from './call_options.ts';
import type { NativeGroup, NativeOp } from './wire.ts';
import { pickBackend } from './tuning.ts';

/** One call as its collective describes it: name, header detail (`sum/ring`), the caller's input. */
export interface CallSpec {
  op: string;
  detail: string;
  x: NumArray;
  timeoutMs?: number;
  /** This call's backend; absent: the communicator's. */
  backend?: Backend | 'auto';
}

/** Runs `body` (or `native` under backend `mpi`) for communicator `c`; see the module doc. */
export async function runCall(
  c: Communicator,
  call: CallSpec,
  native: (g: NativeGroup) => Promise<unknown>,
  body: (l: Link) => Promise<unknown>,
): Promise<void> {
  const t = c.transport;
  const start = wallMs(), simStart = t.clock.now;
  const seq = peekSeq(t, c.id);
  const mpi = backendOf(c, call) === 'mpi';
  if (mpi) {
    const g = c.nativeGroup();
    nextSeq(t, c.id);
    await native(g);
  } else await body(callLink(t, c.ranks, c.rank, c.id, call.op, call.detail, call.x, call.timeoutMs));
  t.tracer.record({
    kind: 'collective',
    op: call.op,
    group: c.id,
    algorithm: mpi ? 'mpi' : algorithmOf(call.detail),
    bytes: call.x.byteLength,
    peer: -1,
    start,
    end: wallMs(),
    simStart,
    simEnd: t.clock.now,
    seq,
  });
}

/** The native reduction of `op` (avg is a sum the communicator divides afterwards). */
export function nativeOp(op: ReduceOp): NativeOp {
  return op === 'avg' ? 'sum' : op;
}

/**
 * The backend a call runs on: its own, else the communicator's; `auto` looks the call up in the
 * communicator's tuning table (tuning.ts) by collective, group size and bytes (a barrier, which
 * the table does not measure, runs ours).
 * @throws Error for `auto` without a table, or a table with no entry for the collective.
 */
export function backendOf(c: Communicator, call: CallSpec): Backend {
  const b = call.backend ?? c.backend;
  if (b !== 'auto') return b;
  if (call.op === 'barrier') return 'ours'; // no size to look up: the table measures the sized collectives only
  if (!c.tuning) {
    throw new Error(
      `${call.op} in group ${c.id}: backend 'auto' needs a tuning table (npm run bench -- comm --transport mpi --tune FILE)`,
    );
  }
  const pick = pickBackend(c.tuning, call.op, call.x.byteLength, c.size);
  if (!pick) throw new Error(`${call.op} in group ${c.id}: the tuning table has no entry for ${call.op}`);
  return pick.backend;
}
