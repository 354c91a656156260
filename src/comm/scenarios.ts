/**
 * The collective test scenarios, shared by the Deno tests (tests/comm/scenario.worker.ts) and
 * the Chromium page (collectives.html, through workers/rank.worker.ts), so both runtimes run
 * the same matrix: every collective × algorithm × op × dtype × in/out of place, checked on each
 * rank bit for bit against a CPU reference (f64 arithmetic, rounded once to the output dtype)
 * on deterministic integer-valued inputs — no data ships back to the host. Test support code:
 * not used by training.
 */
import type { RankTask } from './launch.ts';
import type { Communicator, NumArray, ReduceOp } from './communicator.ts';
import { type Algorithm, ALGORITHMS, type Backend } from './call_options.ts';
import { DeviceMesh, MESH_DIMS } from './mesh.ts';

export type DT = 'f32' | 'i32';

/** Integer-valued input of group rank `r` for case `seed`: values in −50…50. */
export function input(dt: DT, r: number, n: number, seed: number): NumArray {
  const a = dt === 'f32' ? new Float32Array(n) : new Int32Array(n);
  for (let i = 0; i < n; i++) a[i] = ((r * 131 + i * 17 + seed * 7 + 1000) % 101) - 50;
  return a;
}

/** Elementwise reduction of `xs` (one per rank); avg = exact sum / p, rounded once. */
export function reduceRef(xs: NumArray[], op: ReduceOp): number[] {
  const n = xs[0].length;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const v = xs.map((x) => x[i]);
    if (op === 'sum') out.push(v.reduce((a, b) => a + b, 0));
    else if (op === 'avg') out.push(v.reduce((a, b) => a + b, 0) / xs.length);
    else if (op === 'max') out.push(Math.max(...v));
    else out.push(Math.min(...v));
  }
  return out;
}

/** The same values stored in `like`'s dtype (f32 rounding or i32). */
export function as(like: NumArray, v: ArrayLike<number>): NumArray {
  return like instanceof Float32Array ? Float32Array.from(v) : Int32Array.from(v);
}

/** "" when bit-identical (Object.is per element, same dtype and length), else the first difference. */
export function diff(got: NumArray, want: NumArray): string {
  if (got.constructor !== want.constructor) return `dtype ${got.constructor.name} vs ${want.constructor.name}`;
  if (got.length !== want.length) return `length ${got.length} vs ${want.length}`;
  for (let i = 0; i < got.length; i++) {
    if (!Object.is(got[i], want[i])) return `[${i}] ${got[i]} vs ${want[i]}`;
  }
  return '';
}

const OPS: Record<DT, ReduceOp[]> = { f32: ['sum', 'avg', 'max', 'min'], i32: ['sum', 'max', 'min'] };
const DTS: DT[] = ['f32', 'i32'];

export interface Report {
  cases: number;
  failures: string[];
}

/**
 * Every collective × algorithm × op × dtype × in/out of place on `g` (group-local checks). With
 * backend `mpi` every call runs MPI's own collective instead (one pass: algorithms do not apply).
 */
export async function matrix(g: Communicator, backend: Backend = 'ours'): Promise<Report> {
  const algos = <C extends keyof typeof ALGORITHMS>(c: C): readonly Algorithm[] =>
    backend === 'ours' ? ALGORITHMS[c] : ALGORITHMS[c].slice(0, 1);
  const p = g.size, r = g.rank;
  const rep: Report = { cases: 0, failures: [] };
  let seed = 0;
  const all = (dt: DT, n: number, s: number) => [...Array(p).keys()].map((q) => input(dt, q, n, s));
  const check = (what: string, got: NumArray, want: NumArray) => {
    rep.cases++;
    const d = diff(got, want);
    if (d && rep.failures.length < 20) rep.failures.push(`p=${p} rank ${r} ${what}: ${d}`);
  };
  for (const dt of DTS) {
    for (const inPlace of [true, false]) {
      const mode = `${dt} ${inPlace ? 'in-place' : 'out-of-place'}`;
      for (const algorithm of algos('allReduce')) {
        for (const op of OPS[dt]) {
          for (const n of [1, 5, 37]) {
            const xs = all(dt, n, ++seed);
            const x = xs[r].slice();
            const out = inPlace ? undefined : as(x, new Array(n).fill(0));
            const res = await g.allReduce(x, { op, algorithm, out, backend });
            const want = as(x, reduceRef(xs, op));
            check(`allReduce ${op}/${algorithm} ${mode} n=${n}`, res, want);
            if (!inPlace) check(`allReduce ${op}/${algorithm} input kept`, x, xs[r]);
          }
        }
      }
      for (const algorithm of algos('reduceScatter')) {
        for (const op of OPS[dt]) {
          for (const c of [1, 3]) {
            const xs = all(dt, c * p, ++seed);
            const x = xs[r].slice();
            const out = inPlace ? undefined : as(x, new Array(c).fill(0));
            const res = await g.reduceScatter(x, { op, algorithm, out, backend });
            check(
              `reduceScatter ${op}/${algorithm} ${mode} c=${c}`,
              res,
              as(x, reduceRef(xs, op).slice(r * c, r * c + c)),
            );
          }
        }
      }
      for (const algorithm of algos('allGather')) {
        for (const c of [0, 1, 4]) {
          const xs = all(dt, c, ++seed);
          const want = as(xs[0], xs.flatMap((x) => [...x]));
          let res: NumArray;
          if (inPlace) {
            const buf = as(xs[0], new Array(c * p).fill(0));
            buf.set(xs[r], r * c);
            res = await g.allGather(buf.subarray(r * c, r * c + c), { algorithm, out: buf, backend });
            check(`allGather ${algorithm} ${mode} same buffer`, buf, want);
          } else res = await g.allGather(xs[r].slice(), { algorithm, backend });
          check(`allGather ${algorithm} ${mode} c=${c}`, res, want);
        }
      }
      for (const algorithm of algos('broadcast')) {
        for (let root = 0; root < p; root++) {
          const xs = all(dt, 9, ++seed);
          const x = xs[r].slice();
          const res = await g.broadcast(x, root, {
            algorithm,
            backend,
            out: inPlace ? undefined : as(x, new Array(9).fill(0)),
          });
          check(`broadcast root=${root}/${algorithm} ${mode}`, res, xs[root]);
          if (!inPlace) check(`broadcast input kept`, x, xs[r]);
        }
      }
      for (const algorithm of algos('reduce')) {
        for (const op of OPS[dt]) {
          for (const root of new Set([0, p - 1, p >> 1])) {
            const xs = all(dt, 7, ++seed);
            const x = xs[r].slice();
            const res = await g.reduce(x, root, {
              op,
              algorithm,
              backend,
              out: inPlace ? undefined : as(x, new Array(7).fill(0)),
            });
            if (r === root) check(`reduce ${op}/root=${root}/${algorithm} ${mode}`, res, as(x, reduceRef(xs, op)));
            if (r !== root || !inPlace) check(`reduce input kept`, x, xs[r]);
          }
        }
      }
      for (const c of [1, 3]) {
        const xs = all(dt, c * p, ++seed);
        const x = xs[r].slice();
        const res = await g.allToAll(x, { backend, out: inPlace ? undefined : as(x, new Array(c * p).fill(0)) });
        const want = as(x, xs.flatMap((y) => [...y.subarray(r * c, r * c + c)]));
        check(`allToAll ${mode} c=${c}`, res, want);
      }
    }
  }
  for (const algorithm of algos('barrier')) {
    await g.barrier({ algorithm, backend });
    rep.cases++;
  }
  return rep;
}

/**
 * The scenario tasks every collective test world serves (Deno test workers, the rank worker in
 * browsers): run by name through World.run.
 */
export const SCENARIO_TASKS: Record<string, RankTask> = {
  /** args: null → the world; { groups: number[][] } → the group holding this rank (or none). */
  matrix(world, args: { groups?: number[][] } | null) {
    const mine = args?.groups?.find((g) => g.includes(world.transport.rank));
    if (args?.groups && !mine) return { cases: 0, failures: [] };
    return matrix(mine ? world.newGroup(mine) : world);
  },

  /** Rank 0 calls reduceScatter where everyone else calls allReduce. */
  async mismatch(world, args: { timeoutMs: number }) {
    await world.barrier();
    const x = new Float32Array(1024 * (world.transport.rank === 0 ? 1 : 1));
    if (world.rank === 0) await world.reduceScatter(x, { timeoutMs: args.timeoutMs });
    else await world.allReduce(x, { timeoutMs: args.timeoutMs });
  },

  /**
   * The last rank never calls the allReduce the others wait in. Every rank passes a barrier
   * first, so a slow start of a present rank cannot be what a waiting rank's timeout names.
   */
  async missing(world, args: { timeoutMs: number; catchLocally: boolean }) {
    await world.barrier();
    if (world.rank === world.size - 1) return 'skipped';
    try {
      await world.allReduce(new Float32Array(8), { algorithm: 'direct', timeoutMs: args.timeoutMs });
    } catch (e) {
      if (args.catchLocally) return (e as Error).message;
      throw e;
    }
    return 'finished';
  },

  /** Rank 1 throws between allReduces while its peers wait in the next one. */
  async throws(world) {
    for (let i = 0; i < 5; i++) {
      if (world.rank === 1 && i === 2) throw new Error('boom from rank 1');
      await world.allReduce(new Float32Array(16));
    }
  },

  /** Rank 0 never returns (no collective involved): only the world's run limit can end it. */
  hang(world) {
    return world.rank === 0 ? new Promise(() => {}) : 'done';
  },

  /** Point to point: a ring of tagged sends, then a receive with the wrong length. */
  async p2p(world) {
    const p = world.size, r = world.rank;
    const got = new Int32Array(3);
    await world.send(new Int32Array([r, r * 10, r * 100]), (r + 1) % p, { tag: 7 });
    await world.recv(got, (r + p - 1) % p, { tag: 7 });
    const q = (r + p - 1) % p;
    const ok = got[0] === q && got[1] === q * 10 && got[2] === q * 100;
    let mismatch = '';
    if (r === 0) await world.send(new Float32Array(4), 1);
    if (r === 1) await world.recv(new Float32Array(5), 0, { timeoutMs: 2000 }).catch((e) => (mismatch = e.message));
    return { ok, mismatch };
  },

  /** DeviceMesh [2,2,1,2]: group ranks and an allReduce over each dimension's group. */
  async mesh(world, args: { shape: number[] }) {
    const mesh = new DeviceMesh(args.shape, world.size, world.rank);
    const out: Record<string, unknown> = { coords: mesh.coords() };
    for (const d of MESH_DIMS) {
      const ranks = mesh.group(d);
      const sum = await mesh.communicator(world, d).allReduce(new Int32Array([world.rank]));
      out[d] = { ranks, sum: sum[0] };
    }
    return out;
  },
};
