/**
 * Launching a world of ranks (docs/design.md#ranks-and-the-collective-layer): N module workers, a data plane between
 * them — shared-memory rings where SharedArrayBuffer is usable (docs/design.md#the-shared-data-plane-of-worker-ranks,
 * data_plane.ts chooses), else a full mesh of `MessageChannel`s (see transport.ts) — and comlink as the control plane
 * (init / run / shutdown), as the browser demo drives workers/rank.worker.ts.
 *
 * Host side: {@link World.launch}. Worker side: a module that calls {@link serveRank} with its
 * named tasks. A task that throws (or times out waiting for a peer) aborts the whole world:
 * every worker is terminated and the caller's `run` rejects with "rank R: <message>" (no prefix
 * when the message already starts with "rank R", as transport errors do) — never a hang. Runtime-neutral (Deno module workers and browsers).
 */
import * as Comlink from 'comlink';
import { Transport } from './transport.ts';
import { Communicator } from './communicator.ts';
import { NetworkModel, type NetworkSpec } from './network.ts';
import { type ChromeTrace, type Span, toChromeTrace } from './trace.ts';
import { choosePlane } from './data_plane.ts';
import { type SharedPlane, SharedWire } from './shared_wire.ts';
import type { DataPlane } from './data_plane.ts';

/** What a rank receives at init. `ports[j]` leads to rank j; `ports[rank]` is null. */
export interface RankInit {
  rank: number;
  worldSize: number;
  /** The MessagePort mesh of the message plane (empty on the shared plane). */
  ports: (MessagePort | null)[];
  /**
   * The rings and doorbells of the shared plane (docs/design.md#the-shared-data-plane-of-worker-ranks); absent: the
   * message plane.
   */
  shared?: SharedPlane;
  /** Default receive timeout in ms. */
  timeoutMs: number;
  /** Network model of the simulated clock (network.ts); null: messages cost no simulated time. */
  net?: NetworkSpec | null;
  /** Record spans (default true). */
  trace?: boolean;
}

/** A named task: runs on every rank with the world communicator and per-rank args. */
// deno-lint-ignore no-explicit-any
export type RankTask = (world: Communicator, args: any) => unknown;

/** The comlink control API each rank worker exposes. */
export interface RankControl {
  /** Joins the world: builds the transport over the ports and the world communicator. */
  join(init: RankInit): void;
  /** Runs task `name`; resolves to its (structured-cloneable) result. */
  run(name: string, args?: unknown): Promise<unknown>;
  /** The spans recorded so far (dropped from the rank when `clear`). */
  trace(clear?: boolean): Span[];
  /** Swaps the network model (null: none) and, when `resetClock`, restarts the simulated clock at 0. */
  setNetwork(net: NetworkSpec | null, resetClock?: boolean): void;
  shutdown(): void;
}

/**
 * The {@link RankControl} of one worker over `tasks`, for workers that expose more than it
 * (workers/rank.worker.ts); `world()` is the world communicator once joined, else undefined.
 */
export function rankControl(tasks: Record<string, RankTask>): RankControl & { world(): Communicator | undefined } {
  let world: Communicator | undefined;
  const need = () => {
    if (!world) throw new Error('rank: not joined to a world yet (call join first)');
    return world;
  };
  return {
    world: () => world,
    join(init) {
      const net = init.net ? new NetworkModel(init.net) : null;
      const wire = init.shared ? new SharedWire(init.rank, init.shared) : init.ports;
      world = Communicator.world(new Transport(init.rank, wire, { timeoutMs: init.timeoutMs, net, trace: init.trace }));
    },
    trace(clear = false) {
      const t = need().tracer;
      const out = [...t.spans];
      if (clear) t.clear();
      return out;
    },
    setNetwork(net, resetClock = false) {
      const clock = need().transport.clock;
      clock.net = net ? new NetworkModel(net) : null;
      if (resetClock) clock.reset();
    },
    async run(name, args) {
      if (!world) throw new Error('rank: run before init');
      const task = tasks[name];
      if (!task) {
        throw new Error(`rank ${world.transport.rank}: no task '${name}' (have ${Object.keys(tasks).join(', ')})`);
      }
      return await task(world, args);
    },
    shutdown() {
      world?.transport.close();
    },
  };
}

/** Worker side: exposes {@link RankControl} over comlink with the given tasks. */
export function serveRank(tasks: Record<string, RankTask>): void {
  const { world: _, ...api } = rankControl(tasks);
  Comlink.expose(api);
}

export interface LaunchOptions {
  /** Number of ranks, 1–16. */
  size: number;
  /** Module URL of a worker that calls {@link serveRank} (or serves {@link rankControl}). */
  url?: URL | string;
  /**
   * Starts rank r's worker instead of `url` — for Vite, which bundles a worker only when it sees
   * `new Worker(new URL('…', import.meta.url), { type: 'module' })` literally in the source.
   */
  spawn?: (rank: number) => Worker;
  /** Network model of the ranks' simulated clocks: a spec or text for parseNetwork (default none). */
  net?: NetworkSpec | string | null;
  /** Record spans on every rank (default true). */
  trace?: boolean;
  /** Default per-receive timeout in ms (default 30 000). */
  timeoutMs?: number;
  /** Limit on one {@link World.run} in ms, guarding against tasks that never return (default 120 000). */
  runTimeoutMs?: number;
  /**
   * The data plane (docs/design.md#the-shared-data-plane-of-worker-ranks): `shared` (SharedArrayBuffer rings) or
   * `message` (MessagePorts). Default: shared where SharedArrayBuffer is usable, else message, with the reason in
   * {@link World.planeNote}. Asking for shared where it is not usable throws.
   */
  dataPlane?: DataPlane;
  /** Shared plane: data bytes of each ring (default: data_plane.ts choosePlane's); twice the largest message at least. */
  regionBytes?: number;
}

/** Host side: a running world of rank workers. */
export class World {
  readonly size: number;
  /** The data plane the ranks exchange tensors over. */
  dataPlane: DataPlane = 'message';
  /** Why the message plane was chosen when shared was not asked for and cannot run, else ''. */
  planeNote = '';
  /** Shared plane: data bytes of each ring (0 on the message plane). */
  regionBytes = 0;
  private readonly workers: Worker[];
  private readonly ranks: Comlink.Remote<RankControl>[];
  private readonly runTimeoutMs: number;
  private failure: Error | undefined;
  private terminated = false;
  private failed!: Promise<never>;
  private fail!: (e: Error) => void;

  private constructor(workers: Worker[], runTimeoutMs: number) {
    this.size = workers.length;
    this.workers = workers;
    this.runTimeoutMs = runTimeoutMs;
    this.ranks = workers.map((w) => Comlink.wrap<RankControl>(w));
    this.failed = new Promise<never>((_, reject) => {
      this.fail = (e) => {
        if (this.failure) return;
        this.failure = e;
        this.terminate();
        reject(e);
      };
    });
    this.failed.catch(() => {});
    workers.forEach((w, r) =>
      w.addEventListener('error', (ev) => {
        ev.preventDefault();
        this.fail(new Error(`rank ${r}: ${ev.message || 'worker failed'}`));
      })
    );
  }

  /**
   * Starts `size` workers, builds the port mesh (one MessageChannel per pair) and initialises
   * each rank with its ports (transferred). Throws for a size outside 1–16 or a worker that
   * fails to start.
   */
  static async launch(opts: LaunchOptions): Promise<World> {
    const n = opts.size;
    if (!Number.isInteger(n) || n < 1 || n > 16) throw new Error(`launch: world size ${n} is outside 1–16`);
    const { url, spawn } = opts;
    if (!url === !spawn) throw new Error('launch: give exactly one of url and spawn');
    const net = typeof opts.net === 'string' ? NetworkModel.parse(opts.net).spec : opts.net ?? null;
    const workers = [...Array(n).keys()].map((r) =>
      spawn ? spawn(r) : new Worker(url!, { type: 'module', name: `rank${r}` })
    );
    const plane = choosePlane(n, opts.dataPlane, opts.regionBytes);
    const world = new World(workers, opts.runTimeoutMs ?? 120_000);
    world.dataPlane = plane.shared ? 'shared' : 'message';
    world.planeNote = plane.note;
    world.regionBytes = plane.shared?.regionBytes ?? 0;
    const ports: (MessagePort | null)[][] = [...Array(n)].map(() => new Array(n).fill(null));
    for (let i = 0; i < n && !plane.shared; i++) {
      for (let j = i + 1; j < n; j++) {
        const ch = new MessageChannel();
        ports[i][j] = ch.port1;
        ports[j][i] = ch.port2;
      }
    }
    const timeoutMs = opts.timeoutMs ?? 30_000;
    await world.guard('join', (r) => {
      const init: RankInit = {
        rank: r,
        worldSize: n,
        ports: ports[r],
        shared: plane.shared,
        timeoutMs,
        net,
        trace: opts.trace ?? true,
      };
      return world.ranks[r].join(Comlink.transfer(init, ports[r].filter((p): p is MessagePort => p !== null)));
    });
    return world;
  }

  /**
   * Runs task `name` on every rank (args: one value for all, or a function of the rank) and
   * resolves to the results in rank order. The first rank to fail aborts the world (all
   * workers terminated) and the call rejects with "rank R: <its message>".
   */
  run<R = unknown>(name: string, args?: unknown | ((rank: number) => unknown)): Promise<R[]> {
    const argOf = (r: number) => (typeof args === 'function' ? (args as (r: number) => unknown)(r) : args);
    return this.guard(name, (r) => this.ranks[r].run(name, argOf(r))) as Promise<R[]>;
  }

  /** Every rank's spans merged in rank order (and dropped from the ranks when `clear`). */
  async trace(clear = false): Promise<Span[]> {
    return (await this.guard('trace', (r) => this.ranks[r].trace(clear))).flat();
  }

  /** {@link trace} as Chrome Trace Event JSON (trace.json; opens in Perfetto). */
  async chromeTrace(meta: Record<string, unknown> = {}, clear = false): Promise<ChromeTrace> {
    return toChromeTrace(await this.trace(clear), { worldSize: this.size, dataPlane: this.dataPlane, ...meta });
  }

  /** Sets every rank's network model (spec, text or null) and optionally restarts their simulated clocks at 0. */
  async setNetwork(net: NetworkSpec | string | null, resetClock = false): Promise<void> {
    const spec = typeof net === 'string' ? NetworkModel.parse(net).spec : net;
    await this.guard('setNetwork', (r) => this.ranks[r].setNetwork(spec, resetClock));
  }

  /** Closes every rank's ports and terminates the workers. Safe to call twice or after a failure. */
  async shutdown(): Promise<void> {
    if (!this.failure) {
      await Promise.race([
        Promise.allSettled(this.ranks.map((r) => r.shutdown())),
        new Promise((res) => setTimeout(res, 1000)),
      ]);
    }
    this.failure ??= new Error('world: shut down');
    this.terminate();
  }

  private terminate(): void {
    if (this.terminated) return;
    this.terminated = true;
    for (const r of this.ranks) r[Comlink.releaseProxy]();
    for (const w of this.workers) w.terminate();
  }

  private async guard<T>(what: string, call: (rank: number) => Promise<T>): Promise<T[]> {
    if (this.failure) throw new Error(`world is down: ${this.failure.message}`);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = new Array<boolean>(this.size).fill(false);
    const calls = [...Array(this.size).keys()].map((r) =>
      call(r).then((v) => {
        done[r] = true;
        return v;
      }, (e) => {
        const msg = e instanceof Error ? e.message : String(e);
        this.fail(new Error(msg.startsWith(`rank ${r}`) ? msg : `rank ${r}: ${msg}`, { cause: e }));
        throw e;
      })
    );
    calls.forEach((c) => c.catch(() => {}));
    const limit = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const left = done.flatMap((d, r) => (d ? [] : [r]));
        reject(new Error(`world: '${what}' ran past ${this.runTimeoutMs} ms on rank(s) ${left.join(', ')}`));
      }, this.runTimeoutMs);
    });
    limit.catch((e) => this.fail(e));
    try {
      return await Promise.race([Promise.all(calls), this.failed, limit]);
    } catch (e) {
      throw this.failure ?? e;
    } finally {
      clearTimeout(timer);
    }
  }
}
