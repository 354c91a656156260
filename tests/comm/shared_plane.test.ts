/**
 * The shared data plane (docs/design.md#the-shared-data-plane-of-worker-ranks): the ring's record layout, wrap-around
 * and backpressure in one thread; then worlds of rank workers: a stress run of concurrent groups and sizes on both
 * planes, a rank that dies mid-collective, a message too large for its ring, the plane in the trace, and the choice of
 * plane with its reason.
 */
import { deepStrictEqual, equal, match, ok, throws } from 'node:assert/strict';
import { Ring } from '../../src/comm/shared_ring.ts';
import { choosePlane, planeDefaults, regionBytesFor, sharedPlaneSupport } from '../../src/comm/data_plane.ts';
import { PLANES, withWorld, WORKER_TEST } from './world.ts';

const worker = 'plane.worker.ts';

Deno.test('ring: records of mixed sizes wrap around in order and a full ring refuses rather than overwrites', () => {
  const ring = new Ring(Ring.create(4096));
  const h = ring.encodeHeader({ k: 0 });
  const got: number[] = [];
  let sent = 0, refused = 0;
  for (let round = 0; round < 200; round++) {
    // Write until the ring refuses, then read everything: wraps land at every offset.
    for (;;) {
      const n = 1 + ((sent * 97) % 1900);
      const payload = new Uint8Array(n).fill(sent & 255);
      if (!ring.tryWrite(ring.encodeHeader({ k: sent }), payload)) {
        refused++;
        break;
      }
      sent++;
    }
    ring.drain((hdr, view) => {
      const k = (hdr as { k: number }).k;
      equal(view.byteLength, 1 + ((k * 97) % 1900));
      ok(view.every((b) => b === (k & 255)), `record ${k} was overwritten`);
      ok(view.byteOffset % 8 === 0, 'payloads are 8-byte aligned');
      got.push(k);
    });
  }
  deepStrictEqual(got, [...Array(sent).keys()]);
  equal(refused, 200);
  ok(ring.fits(h, 2000) && !ring.fits(h, 2048));
  equal(ring.ready(), false);
});

Deno.test('plane choice: message when asked or when SharedArrayBuffer is unusable (with the reason), never silently', () => {
  // The choice a caller who names no plane gets, whatever DATA_PLANE the suite runs under.
  const suite = planeDefaults.unnamed;
  planeDefaults.unnamed = null;
  try {
    choices();
  } finally {
    planeDefaults.unnamed = suite;
  }
});

function choices(): void {
  equal(sharedPlaneSupport(), '');
  equal(choosePlane(2).shared?.regionBytes, 4 << 20);
  equal(choosePlane(16).shared?.regionBytes, Math.floor((256 << 20) / 240), 'big worlds: 256 MiB of rings in all');
  equal(choosePlane(2, undefined, 1000).shared?.regionBytes, 64 << 10, 'never below 64 KiB');
  equal(choosePlane(2, 'message').shared, undefined);
  const g = globalThis as { crossOriginIsolated?: boolean };
  const was = Object.getOwnPropertyDescriptor(globalThis, 'crossOriginIsolated');
  Object.defineProperty(globalThis, 'crossOriginIsolated', { value: false, configurable: true });
  try {
    const c = choosePlane(2);
    equal(c.shared, undefined);
    match(c.note, /^data plane: message \(MessagePorts\), because the page is not cross-origin isolated/);
    match(c.note, /Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp/);
    throws(() => choosePlane(2, 'shared'), /--data-plane shared cannot run here/);
  } finally {
    if (was) Object.defineProperty(globalThis, 'crossOriginIsolated', was);
    else delete g.crossOriginIsolated;
  }
  equal(regionBytesFor(1 << 20), (2 << 20) + 4096);
  equal(regionBytesFor(10, 2), 2 << 20);
}

for (const dataPlane of PLANES) {
  Deno.test({
    name:
      `${dataPlane} plane: stress — concurrent groups, sizes and p2p streams, thousands of calls, nothing lost or reordered`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        4,
        async (w) => {
          const reps = await w.run<{ calls: number; failures: string[] }>('stress', { calls: 400 });
          deepStrictEqual(reps.flatMap((r) => r.failures), []);
          ok(
            reps.reduce((a, r) => a + r.calls, 0) >= 4000,
            'thousands of calls',
          );
        },
        20_000,
        240_000,
        { worker, dataPlane, regionBytes: 1 << 20 }, // a ring holds two 400 KB messages at most: backpressure is exercised
      ),
  });

  Deno.test({
    name:
      `${dataPlane} plane: a rank that dies while its peers wait in a collective makes them fail within the timeout, naming it`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        3,
        async (w) => {
          const t0 = performance.now();
          // 2 s: the live ranks' parts reach each other well before it even on two busy cores (at 500 ms a
          // slow peer was once named beside the dead one), so only the dead rank is missing.
          await w.run('dies', { timeoutMs: 2000 }).then(() => {
            throw new Error('expected a rejection');
          }, (e: Error) =>
            match(
              e.message,
              /^rank [01] timed out after 2000 ms in allReduce\(sum\/direct, f32×65536\) \(group world#1\) waiting for rank\(s\) 2$/,
            ));
          ok(performance.now() - t0 < 30_000, 'the waiting ranks failed, not hung until the run limit');
        },
        10_000,
        60_000,
        { worker, dataPlane },
      ),
  });
}

Deno.test({
  name: 'shared plane: a message larger than the ring fails at once naming --region-mb and --data-plane',
  ...WORKER_TEST,
  fn: () =>
    withWorld(
      2,
      async (w) => {
        const t0 = performance.now();
        const msgs = await w.run<string>('tooBig', { bytes: 1 << 20 });
        for (const [r, m] of msgs.entries()) {
          match(
            m,
            new RegExp(
              `^shared data plane: rank ${r}'s allReduce\\(sum/direct, f32×262144\\) message of 1 MiB to rank ${
                1 - r
              } \\(group world#0\\) does not fit its 0\\.25 MiB region .*: raise --region-mb to at least 3 or use --data-plane message$`,
            ),
          );
        }
        // The message is the region check's, not a timeout's; the send's timeout is 120 s, past this generous guard.
        ok(performance.now() - t0 < 30_000, 'refused at the send, not by a timeout');
        equal((await w.chromeTrace()).otherData?.dataPlane, 'shared');
      },
      10_000,
      60_000,
      { worker, dataPlane: 'shared', regionBytes: 256 << 10 },
    ),
});
