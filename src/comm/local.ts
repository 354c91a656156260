/**
 * A world of ranks inside one thread: the same Transport mesh (one `MessageChannel` per pair)
 * without workers, so every rank's Communicator lives in this realm and their calls interleave
 * on the event loop. For simulated-clock studies and unit tests, where wall-clock parallelism
 * does not matter and worker start-up would dominate; launch.ts is the real thing.
 */
import { Communicator } from './communicator.ts';
import { NetworkModel } from './network.ts';
import { Transport } from './transport.ts';
import { createSharedPlane, type DataPlane, DEFAULT_REGION_BYTES, planeDefaults } from './data_plane.ts';
import { SharedWire } from './shared_wire.ts';

export interface LocalWorldOptions {
  /** Network model (or its text, see parseNetwork); default none. */
  net?: NetworkModel | string | null;
  /**
   * Receive timeout in ms (default 60 000). The ranks share one thread, so a rank's wait also
   * runs the clock through its peers' work: a first kernel compile on a CPU adapter under load
   * (Dawn on SwiftShader: over 10 s) must not read as a missing rank.
   */
  timeoutMs?: number;
  trace?: boolean;
  /**
   * `message` (default, unless `planeDefaults.unnamed` says otherwise: an in-thread port mesh) or
   * `shared` (the rings of docs/design.md#the-shared-data-plane-of-worker-ranks, without a spin: the ranks share one
   * thread, so a peer can only answer once this one yields).
   */
  dataPlane?: DataPlane;
}

/**
 * `size` world communicators (index = rank) over an in-thread port mesh or shared rings.
 * @throws Error for a size outside 1–16 or a bad network description.
 */
export function localWorld(size: number, opts: LocalWorldOptions = {}): Communicator[] {
  if (!Number.isInteger(size) || size < 1 || size > 16) {
    throw new Error(`localWorld: world size ${size} is outside 1–16`);
  }
  const net = typeof opts.net === 'string' ? NetworkModel.parse(opts.net) : opts.net ?? null;
  const make = (r: number, wire: (MessagePort | null)[] | SharedWire) =>
    Communicator.world(new Transport(r, wire, { timeoutMs: opts.timeoutMs ?? 60_000, net, trace: opts.trace }));
  if ((opts.dataPlane ?? planeDefaults.unnamed) === 'shared' && size > 1) {
    const plane = createSharedPlane(size, DEFAULT_REGION_BYTES, 0);
    return [...Array(size).keys()].map((r) => make(r, new SharedWire(r, plane)));
  }
  const ports: (MessagePort | null)[][] = [...Array(size)].map(() => new Array(size).fill(null));
  for (let i = 0; i < size; i++) {
    for (let j = i + 1; j < size; j++) {
      const ch = new MessageChannel();
      ports[i][j] = ch.port1;
      ports[j][i] = ch.port2;
    }
  }
  return ports.map((p, r) => make(r, p));
}

/** Runs `fn` on every rank of a local world concurrently; resolves to the results in rank order. */
export function onEveryRank<T>(world: Communicator[], fn: (c: Communicator) => Promise<T>): Promise<T[]> {
  return Promise.all(world.map(fn));
}

/** Closes every rank's ports. */
export function closeLocalWorld(world: Communicator[]): void {
  for (const c of world) c.transport.close();
}
