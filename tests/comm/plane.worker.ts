/**
 * Test-only rank worker for the data planes (docs/design.md#the-shared-data-plane-of-worker-ranks): the shared scenario
 * tasks plus a stress run of many concurrent groups and sizes, a rank that dies mid-collective, and a message too large
 * for its ring.
 */
import { serveRank } from '../../src/comm/launch.ts';
import { SCENARIO_TASKS } from '../../src/comm/scenarios.ts';
import type { Communicator } from '../../src/comm/communicator.ts';

/** Element i of rank r's input to call k: integer-valued, so sums are exact in f32. */
const val = (r: number, k: number, i: number) => ((r * 7 + k * 13 + i * 3) % 61) - 30;

/** Call k of a group of `ranks` on `c`: an allReduce of a size that cycles 1 … ~100 K elements, checked exactly. */
async function checkedAllReduce(
  c: Communicator,
  ranks: readonly number[],
  k: number,
  sizes: number[],
): Promise<string> {
  const n = sizes[k % sizes.length];
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = val(c.ranks[c.rank], k, i);
  await c.allReduce(x, { algorithm: k % 3 === 0 ? 'direct' : k % 3 === 1 ? 'ring' : 'recursive-doubling' });
  for (let i = 0; i < n; i++) {
    let want = 0;
    for (const r of ranks) want += val(r, k, i);
    if (x[i] !== want) return `${c.id} call ${k} (${n} elements): [${i}] ${x[i]} vs ${want}`;
  }
  return '';
}

serveRank({
  ...SCENARIO_TASKS,

  /**
   * `calls` allReduces on each of three overlapping groups at once, interleaved, plus a stream of
   * numbered point-to-point messages around the ring: any lost, duplicated or reordered message
   * shows as a wrong sum, a wrong number or a timeout.
   */
  async stress(world, args: { calls: number }) {
    const p = world.size, r = world.rank;
    const all = [...Array(p).keys()];
    const evens = all.filter((q) => q % 2 === 0), odds = all.filter((q) => q % 2 === 1);
    const groups = [world.newGroup(all, 'all'), world.newGroup(r % 2 ? odds : evens, r % 2 ? 'odd' : 'even')];
    const sizes = [1, 7, 1024, 16_384, 3, 100_000, 250, 40_000];
    const failures: string[] = [];
    const lanes = groups.map(async (g) => {
      for (let k = 0; k < args.calls; k++) {
        const f = await checkedAllReduce(g, g.ranks, k, sizes);
        if (f) failures.push(f);
      }
    });
    const stream = (async () => {
      const next = (r + 1) % p, prev = (r + p - 1) % p;
      const got = new Int32Array(64);
      for (let k = 0; k < args.calls; k++) {
        await world.send(new Int32Array(64).fill(k), next, { tag: 3 });
        await world.recv(got, prev, { tag: 3 });
        if (got.some((v) => v !== k)) failures.push(`p2p message ${k} from rank ${prev} held ${got[0]}`);
      }
    })();
    await Promise.all([...lanes, stream]);
    return { calls: groups.length * args.calls + args.calls, failures };
  },

  /** The last rank ends its worker while its peers are in a direct allReduce, which waits on it alone. */
  async dies(world, args: { timeoutMs: number }) {
    await world.barrier();
    if (world.rank === world.size - 1) {
      (self as unknown as { close(): void }).close();
      return new Promise(() => {});
    }
    await world.allReduce(new Float32Array(1 << 16), { algorithm: 'direct', timeoutMs: args.timeoutMs });
  },

  /** A direct allReduce whose one message is `bytes` long; returns the error message, or ''. */
  async tooBig(world, args: { bytes: number }) {
    try {
      // A timeout far past the test's guard: the refusal must come from the send itself.
      await world.allReduce(new Float32Array(args.bytes / 4), { algorithm: 'direct', timeoutMs: 120_000 });
      return '';
    } catch (e) {
      return (e as Error).message;
    }
  },
});
