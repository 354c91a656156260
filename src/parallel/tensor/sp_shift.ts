/**
 * RWKV's token shift under sequence parallelism (docs/design.md#the-token-shift-under-sequence-parallelism): each
 * tensor-parallel rank holds rows [i·n, (i+1)·n) of the (B·T, C) residual-side activations, n = B·T/p, and a row's
 * shift reads the row before it — for a shard's first row, the last row of the previous rank's shard, unless the shard
 * starts a sequence. That one row (C floats) is the halo a rank sends forward to the next rank, and the gradient of it
 * goes back in backward: the exchange is point to point between neighbours, C elements per shift and direction, far
 * less than the all-gather that would otherwise have to run before the shift.
 *
 * Like the other collectives of the parallel layer (src/autograd/collective.ts) it runs on the
 * host: the shard is read back, shifted with the halo, and written. The sends are buffered, so
 * every rank sends before it receives and no order of ranks can deadlock.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import { collectiveOp } from '../../autograd/collective.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';

const HALO_TAG = 31;

/**
 * Which neighbours rank `rank` of `p` exchanges a halo row with: it receives the previous
 * shard's last row when its shard starts inside a sequence, and sends its own last row when the
 * next shard does. Rows per shard n = B·T/p, T the sequence length.
 */
export function haloPeers(rank: number, p: number, n: number, t: number): { fromPrev: boolean; toNext: boolean } {
  return { fromPrev: rank > 0 && (rank * n) % t !== 0, toNext: rank < p - 1 && ((rank + 1) * n) % t !== 0 };
}

/**
 * y (n, C): this rank's rows of the token shift of the whole (B·T, C) x, given its shard x (n, C)
 * of rows [rank·n, (rank+1)·n): y[j] = x_global[g − 1] for global row g = rank·n + j, zero where
 * g starts a sequence (g mod T = 0). Backward: dx[j − 1] += dy[j] inside the shard, and the
 * first row's gradient goes back to the rank that sent the halo.
 * Every rank of `comm` (the tp group, in tp-rank order) must call it with the same b and t.
 * @throws Error when B·T is not divisible by the group size or x is not (B·T/p, C).
 */
export function sequenceParallelShift(
  tape: Tape,
  x: Tensor,
  b: number,
  t: number,
  comm: FloatCollectives,
  label: string,
): Promise<Tensor> {
  const p = comm.size, i = comm.rank, n = (b * t) / p, c = x.size / n;
  if (!Number.isInteger(n) || !Number.isInteger(c)) {
    throw new Error(`${label}: ${b}·${t} rows over ${p} sequence-parallel ranks, or x [${x.shape}] not (B·T/p, C)`);
  }
  const { fromPrev, toNext } = haloPeers(i, p, n, t), g0 = i * n;
  const starts = (j: number) => (g0 + j) % t === 0; // global row g0 + j begins a sequence: its shift is zero
  const forward = async (h: Float32Array) => {
    if (toNext) await comm.send(h.slice((n - 1) * c), i + 1, { tag: HALO_TAG });
    const y = new Float32Array(n * c);
    if (fromPrev) y.set(await comm.recv(new Float32Array(c), i - 1, { tag: HALO_TAG }));
    for (let j = 1; j < n; j++) if (!starts(j)) y.set(h.subarray((j - 1) * c, j * c), j * c);
    return y;
  };
  const backward = async (dy: Float32Array) => {
    if (fromPrev) await comm.send(dy.slice(0, c), i - 1, { tag: HALO_TAG });
    const dx = new Float32Array(n * c);
    for (let j = 1; j < n; j++) if (!starts(j)) dx.set(dy.subarray(j * c, (j + 1) * c), (j - 1) * c);
    if (toNext) {
      const last = await comm.recv(new Float32Array(c), i + 1, { tag: HALO_TAG });
      for (let k = 0; k < c; k++) dx[(n - 1) * c + k] += last[k];
    }
    return dx;
  };
  return collectiveOp(tape, x, x.shape, `${label} (sequence-parallel halo)`, forward, backward);
}
