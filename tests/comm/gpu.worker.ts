/**
 * Test-only rank worker with a GPU: every rank opens its own device (on the backend the test
 * passes in task openGpu) and runs the tensor collectives of src/comm/tensor_comm.ts on small
 * integer-valued tensors, checking the read-back results bit for bit against
 * tests/comm/reference.ts on the rank itself.
 */
import { serveRank } from '../../src/comm/launch.ts';
import type { NumArray, ReduceOp } from '../../src/comm/communicator.ts';
import { ALGORITHMS } from '../../src/comm/call_options.ts';
import { TensorComm } from '../../src/comm/tensor_comm.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { as, diff, type DT, input, reduceRef } from './reference.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  /** The tensor collective matrix; returns { cases, failures, adapter }. */
  async gpuMatrix(world) {
    const g = await rankGpu();
    const tc = new TensorComm(world, g);
    const p = world.size, r = world.rank;
    const rep = { cases: 0, failures: [] as string[], adapter: g.adapterDescription };
    let seed = 100;
    const all = (dt: DT, n: number, s: number) => [...Array(p).keys()].map((q) => input(dt, q, n, s));
    const up = (x: NumArray) => g.upload(x, [x.length], x instanceof Float32Array ? 'f32' : 'i32');
    const check = async (what: string, t: Tensor, want: NumArray) => {
      rep.cases++;
      const d = diff((await g.read(t)) as NumArray, want);
      if (d && rep.failures.length < 20) rep.failures.push(`p=${p} rank ${r} ${what}: ${d}`);
    };
    for (const dt of ['f32', 'i32'] as DT[]) {
      const ops: ReduceOp[] = dt === 'f32' ? ['sum', 'avg', 'max', 'min'] : ['sum', 'max', 'min'];
      for (const inPlace of [true, false]) {
        const mode = `${dt} ${inPlace ? 'in-place' : 'out-of-place'}`;
        const outOf = (n: number) => (inPlace ? undefined : g.zeros([n], dt));
        for (const algorithm of ALGORITHMS.allReduce) {
          for (const op of ops) {
            const xs = all(dt, 13, ++seed);
            const t = up(xs[r]), out = outOf(13);
            const res = await tc.allReduce(t, { op, algorithm, out });
            await check(`allReduce ${op}/${algorithm} ${mode}`, res, as(xs[r], reduceRef(xs, op)));
            if (out) await check(`allReduce input kept`, t, xs[r]);
          }
        }
        for (const algorithm of ALGORITHMS.reduceScatter) {
          const c = 3, xs = all(dt, c * p, ++seed);
          const t = up(xs[r]), out = outOf(c);
          const res = await tc.reduceScatter(t, { algorithm, out });
          await check(
            `reduceScatter sum/${algorithm} ${mode}`,
            res,
            as(xs[r], reduceRef(xs, 'sum').slice(r * c, r * c + c)),
          );
          if (inPlace) {
            const whole = xs[r].slice();
            whole.set(as(xs[r], reduceRef(xs, 'sum').slice(r * c, r * c + c)), r * c);
            await check(`reduceScatter in place leaves other chunks`, t, whole);
          }
        }
        for (const algorithm of ALGORITHMS.allGather) {
          const c = 4, xs = all(dt, c, ++seed);
          const res = await tc.allGather(up(xs[r]), { algorithm, out: outOf(c * p) });
          await check(`allGather ${algorithm} ${mode}`, res, as(xs[0], xs.flatMap((x) => [...x])));
        }
        for (const algorithm of ALGORITHMS.broadcast) {
          for (let root = 0; root < p; root++) {
            const xs = all(dt, 9, ++seed);
            const res = await tc.broadcast(up(xs[r]), root, { algorithm, out: outOf(9) });
            await check(`broadcast root=${root}/${algorithm} ${mode}`, res, xs[root]);
          }
        }
        for (const algorithm of ALGORITHMS.reduce) {
          const root = p - 1, xs = all(dt, 7, ++seed);
          const t = up(xs[r]), out = outOf(7);
          const res = await tc.reduce(t, root, { op: 'max', algorithm, out });
          if (r === root) {
            await check(`reduce max/root=${root}/${algorithm} ${mode}`, res, as(xs[r], reduceRef(xs, 'max')));
          }
          await check(`reduce input kept`, t, r === root && inPlace ? as(xs[r], reduceRef(xs, 'max')) : xs[r]);
        }
        {
          const c = 2, xs = all(dt, c * p, ++seed);
          const res = await tc.allToAll(up(xs[r]), { out: outOf(c * p) });
          await check(`allToAll ${mode}`, res, as(xs[r], xs.flatMap((y) => [...y.subarray(r * c, r * c + c)])));
        }
      }
    }
    // Point to point around the ring, tensor to tensor.
    const xs = all('f32', 5, ++seed);
    await tc.send(up(xs[r]), (r + 1) % p);
    const got = g.zeros([5], 'f32');
    if (p > 1) {
      await tc.recv(got, (r + p - 1) % p);
      await check('send/recv ring', got, xs[(r + p - 1) % p]);
    }
    return rep;
  },

  /** u32 tensors and size mismatches are refused with what was wrong. */
  async gpuErrors(world) {
    const g = await rankGpu();
    const tc = new TensorComm(world, g);
    const errs: string[] = [];
    for (
      const f of [
        () => tc.allReduce(g.zeros([4], 'u32')),
        () => tc.allReduce(g.zeros([4], 'f32'), { out: g.zeros([5], 'f32') }),
        () => tc.allReduce(g.zeros([4], 'f32'), { out: g.zeros([4], 'i32') }),
        () => tc.reduceScatter(g.zeros([world.size * 2 + 1], 'f32')),
      ]
    ) {
      try {
        await f();
        errs.push('no error');
      } catch (e) {
        errs.push((e as Error).message);
      }
    }
    return errs;
  },
});
