/**
 * Choosing a world's data plane (docs/design.md#the-shared-data-plane-of-worker-ranks): the shared plane
 * (SharedArrayBuffer rings, shared_wire.ts) wherever SharedArrayBuffer is usable — Deno always, a browser page only
 * when it is cross-origin isolated — else the MessagePort mesh, and never silently: the reason is kept for the CLI's
 * log and the demo's Setup panel. Also sizes the rings.
 */
import { Ring } from './shared_ring.ts';
import type { SharedPlane } from './shared_wire.ts';

/** The data planes a world of worker ranks can use. */
export type DataPlane = 'shared' | 'message';
export const DATA_PLANES: readonly DataPlane[] = ['shared', 'message'];

/**
 * Test hook: the plane a world takes when its caller names none — `null` keeps each kind's own
 * default (worker worlds: shared where usable; in-thread worlds: message). The test suite sets it
 * from `DATA_PLANE=shared|message` (tests/util/gpu.ts), so every parity test can run on both.
 */
export const planeDefaults: { unnamed: DataPlane | null } = { unnamed: null };

/** Data bytes per ring when neither the caller nor a plan gives a size: 4 MiB (less in big worlds, see choosePlane). */
export const DEFAULT_REGION_BYTES = 4 << 20;
/** What the default rings of one world may take together: 256 MiB, so a world of 16 gets about 1 MiB per ring. */
const DEFAULT_WORLD_BYTES = 256 << 20;
/** The smallest ring: 64 KiB. */
export const MIN_REGION_BYTES = 64 << 10;

/**
 * Why the shared plane cannot run here, or '' when it can: in browsers SharedArrayBuffer needs a
 * cross-origin-isolated page (COOP same-origin + COEP require-corp).
 */
export function sharedPlaneSupport(): string {
  const isolated = (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated;
  if (isolated === false || typeof SharedArrayBuffer === 'undefined') {
    return isolated === false
      ? 'the page is not cross-origin isolated (it needs the headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), so SharedArrayBuffer is unavailable'
      : 'SharedArrayBuffer is unavailable in this runtime';
  }
  if (typeof Atomics === 'undefined') return 'Atomics is unavailable in this runtime';
  return '';
}

/**
 * The rings and doorbells of a world of `size` ranks with `regionBytes` data bytes per ring
 * (one ring per ordered pair: size·(size−1) rings). The receive spin is 50 µs when the ranks fit
 * on the cores (`cores`, default the runtime's count), else 0: a spinning rank would take the
 * core its peer needs to answer.
 * @throws Error when SharedArrayBuffer is unavailable.
 */
export function createSharedPlane(size: number, regionBytes: number, cores?: number): SharedPlane {
  const why = sharedPlaneSupport();
  if (why) throw new Error(`--data-plane shared: ${why}`);
  const ids = [...Array(size).keys()];
  const rings = ids.map((i) => ids.map((j) => i === j ? null : Ring.create(regionBytes)));
  const n = cores ?? (globalThis.navigator?.hardwareConcurrency || 1);
  return { rings, bells: new SharedArrayBuffer(8 * size), regionBytes, spinUs: size <= n ? 50 : 0 };
}

/** The plane a launch gets: the shared plane's buffers (absent: message plane) and why, when it fell back. */
export interface PlaneChoice {
  shared?: SharedPlane;
  /** Non-empty when the message plane was chosen because the shared plane cannot run here. */
  note: string;
}

/**
 * The plane of a world of `size` ranks: `asked` when given, else shared where usable.
 * @param regionBytes data bytes per ring (at least {@link MIN_REGION_BYTES}); default
 *   {@link DEFAULT_REGION_BYTES}, or less where size·(size−1) such rings would pass 256 MiB.
 * @throws Error when shared is asked for and cannot run here (naming --data-plane and why).
 */
export function choosePlane(
  size: number,
  asked?: DataPlane,
  regionBytes = Math.min(DEFAULT_REGION_BYTES, Math.floor(DEFAULT_WORLD_BYTES / (size * (size - 1) || 1))),
): PlaneChoice {
  const why = sharedPlaneSupport();
  asked ??= planeDefaults.unnamed ?? undefined;
  if (asked === 'message' || size < 2) return { note: '' };
  if (why) {
    if (asked === 'shared') throw new Error(`--data-plane shared cannot run here: ${why}`);
    return { note: `data plane: message (MessagePorts), because ${why}` };
  }
  return { shared: createSharedPlane(size, Math.max(MIN_REGION_BYTES, regionBytes)), note: '' };
}

/**
 * Ring bytes for a run whose largest single message is `largestMessage` bytes: room for two such
 * messages (a sender can write the next while the reader reduces the last) plus headers, at
 * least {@link MIN_REGION_BYTES}; `regionMb` (the --region-mb flag), when given, wins.
 */
export function regionBytesFor(largestMessage: number, regionMb?: number): number {
  if (regionMb !== undefined) return Math.round(regionMb * (1 << 20));
  return Math.max(MIN_REGION_BYTES, 2 * Math.ceil(largestMessage / 8) * 8 + 4096);
}
