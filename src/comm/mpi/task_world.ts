/**
 * The host side of a run over MPI (docs/design.md#training-over-mpi). With workers, one host process drives
 * N ranks through comlink (launch.ts `World.run`). Under mpirun there is no such host: every
 * process is a rank AND runs the host loop (run_host.ts `runParallel`) itself, SPMD. `run(name)`
 * runs the task on this process's rank and then gathers every rank's result to every rank, so
 * each copy of the host loop sees the same results and takes the same decisions (divergence,
 * checkpoints, stop); only rank 0 prints and writes files.
 *
 * Results are structured-cloneable values (records, checkpoint bytes), serialised with V8's
 * serializer — the structured clone a worker's postMessage would use — and exchanged with MPI's
 * own allGather on a control communicator of their own, so they never enter a step's traffic.
 * Deno-only.
 */
import { deserialize, serialize } from 'node:v8';
import type { Communicator } from '../communicator.ts';
import type { GroupFamily } from '../groups.ts';
import type { RankTask } from '../launch.ts';
import { type ChromeTrace, toChromeTrace } from '../trace.ts';
import type { MpiWorld } from './world.ts';
import { injectFault } from './job.ts';

/** The id of the communicator the results travel on. */
const CONTROL = 'control';

export class MpiTaskWorld {
  private readonly control: Communicator;

  private constructor(readonly mpi: MpiWorld, private readonly tasks: Record<string, RankTask>) {
    this.control = mpi.world.newGroup([...Array(mpi.size).keys()], CONTROL);
    this.control.backend = 'mpi';
  }

  /**
   * The task world of this MPI rank. Collective over every rank: splits the control
   * communicator and then `families` (the run's process groups, e.g. parallel/plan/plan_groups.ts)
   * off MPI_COMM_WORLD, before any task runs, so every group the tasks make can run MPI's own
   * collectives (docs/design.md#training-over-mpi).
   * @param tasks the tasks a rank worker would serve (e.g. src/parallel/run/run_tasks.ts parallelTasks).
   * @throws what MpiWorld.split throws (invalid families, or families that differ between ranks).
   */
  static async open(
    mpi: MpiWorld,
    tasks: Record<string, RankTask>,
    families: readonly GroupFamily[] = [],
  ): Promise<MpiTaskWorld> {
    const all = [...Array(mpi.size).keys()];
    await mpi.split([{ name: CONTROL, groups: [{ id: CONTROL, ranks: all }] }, ...families]);
    return new MpiTaskWorld(mpi, tasks);
  }

  get size(): number {
    return this.mpi.size;
  }

  get rank(): number {
    return this.mpi.rank;
  }

  /**
   * Runs task `name` on this rank (args: one value, or a function of the rank) and resolves to
   * every rank's result in rank order, as `World.run` does.
   * @throws Error for an unknown task, or what the task throws on this rank.
   */
  async run<R = unknown>(name: string, args?: unknown | ((rank: number) => unknown)): Promise<R[]> {
    const task = this.tasks[name];
    if (!task) throw new Error(`rank ${this.rank}: no task '${name}'`);
    const a = typeof args === 'function' ? (args as (r: number) => unknown)(this.rank) : args;
    if (name === 'trainSteps') injectFault('steps', this.rank); // tests: a rank that dies while its peers step
    return await this.gather(await task(this.mpi.world, a)) as R[];
  }

  /**
   * Every rank's spans as Chrome Trace Event JSON (as `World.chromeTrace`); collective over all
   * ranks. `otherData.processes` says which process recorded which rank's spans — its rank, pid,
   * host and span count, one entry per MPI process — so a trace shows that every rank ran in a
   * process of its own.
   */
  async chromeTrace(meta: Record<string, unknown> = {}): Promise<ChromeTrace> {
    const spans = this.mpi.transport.tracer.spans.filter((s) => s.group !== this.control.id);
    const mine = { rank: this.rank, pid: Deno.pid, host: Deno.hostname(), spans };
    const all = await this.gather(mine) as (typeof mine)[];
    return toChromeTrace(all.flatMap((p) => p.spans), {
      worldSize: this.size,
      transport: 'mpi',
      processes: all.map(({ rank, pid, host, spans }) => ({ rank, pid, host, spans: spans.length })),
      ...meta,
    });
  }

  /** Every rank's `value`, in rank order, on every rank (byte lengths first, then one padded allGather). */
  async gather(value: unknown): Promise<unknown[]> {
    const bytes = new Uint8Array(serialize(value));
    const lens = await this.control.allGather(Int32Array.of(bytes.length));
    const words = Math.ceil(Math.max(...lens) / 4);
    const mine = new Int32Array(words);
    new Uint8Array(mine.buffer).set(bytes);
    const all = await this.control.allGather(mine);
    const bytesOf = new Uint8Array(all.buffer, all.byteOffset, all.byteLength);
    // A copy per rank: node:v8's deserialize reads a view's whole underlying buffer.
    return [...lens].map((n, r) => deserialize(bytesOf.slice(r * words * 4, r * words * 4 + n)));
  }
}
