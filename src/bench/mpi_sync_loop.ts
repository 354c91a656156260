/**
 * MPICH's own collectives called synchronously from Deno FFI, in a loop with nothing between
 * the calls: MPI as seen from this runtime without this project's helper thread (libmpi.ts
 * declares the waiting calls `nonblocking`, so each one hops to a Deno blocking thread and back;
 * here they run on the main thread). Started by the comm bench (mpi_ref.ts) as
 * `mpirun -n p deno run -A src/bench/mpi_sync_loop.ts W WMS K MS MAX collective:bytes…`, the
 * arguments and the JSON lines rank 0 prints are mpi_loop.c's, and so is the loop
 * (comm/timing.ts nextChunk and summarize). MPI is initialised at MPI_THREAD_SINGLE, as the C
 * loop's MPI_Init. Deno-only.
 */
import { CANDIDATES, check, IN_PLACE, MPI } from '../comm/mpi/libmpi.ts';
import { nextChunk, summarize } from '../comm/timing.ts';

const SYMBOLS = {
  MPI_Init_thread: { parameters: ['pointer', 'pointer', 'i32', 'buffer'], result: 'i32' },
  MPI_Finalize: { parameters: [], result: 'i32' },
  MPI_Comm_rank: { parameters: ['i32', 'buffer'], result: 'i32' },
  MPI_Comm_size: { parameters: ['i32', 'buffer'], result: 'i32' },
  MPI_Barrier: { parameters: ['i32'], result: 'i32' },
  MPI_Allreduce: { parameters: ['pointer', 'buffer', 'i32', 'i32', 'i32', 'i32'], result: 'i32' },
  MPI_Reduce_scatter_block: { parameters: ['buffer', 'buffer', 'i32', 'i32', 'i32', 'i32'], result: 'i32' },
  MPI_Allgather: { parameters: ['buffer', 'i32', 'i32', 'buffer', 'i32', 'i32', 'i32'], result: 'i32' },
  MPI_Alltoall: { parameters: ['buffer', 'i32', 'i32', 'buffer', 'i32', 'i32', 'i32'], result: 'i32' },
  MPI_Bcast: { parameters: ['buffer', 'i32', 'i32', 'i32', 'i32'], result: 'i32' },
  MPI_Reduce: { parameters: ['buffer', 'buffer', 'i32', 'i32', 'i32', 'i32', 'i32'], result: 'i32' },
} as const satisfies Deno.ForeignLibraryInterface;

function open(): Deno.DynamicLibrary<typeof SYMBOLS>['symbols'] {
  const errors: string[] = [];
  for (const path of CANDIDATES) {
    try {
      return Deno.dlopen(path, SYMBOLS).symbols;
    } catch (e) {
      errors.push(`${path}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`MPI is not installed: could not load MPICH (${errors.join('; ')})`);
}

/**
 * Runs mpi_loop.c's cases with synchronous FFI calls; rank 0 prints one JSON line per case.
 * @throws Error for a malformed case or a failing MPI call.
 */
function main(argv: string[]): void {
  const m = open();
  const W = MPI.COMM_WORLD;
  check(m.MPI_Init_thread(null, null, 0, new Int32Array(1)), 'MPI_Init_thread');
  const rankBuf = new Int32Array(1), sizeBuf = new Int32Array(1);
  check(m.MPI_Comm_rank(W, rankBuf), 'MPI_Comm_rank');
  check(m.MPI_Comm_size(W, sizeBuf), 'MPI_Comm_size');
  const [rank, size] = [rankBuf[0], sizeBuf[0]];
  const [warmup, warmupMs, minIters, minMs, maxIters] = argv.slice(0, 5).map(Number);
  for (const spec of argv.slice(5)) {
    const [coll, b] = spec.split(':'), bytes = Number(b), n = bytes / 4, part = n / size;
    const input = new Float32Array(n).fill(1), out = new Float32Array(n);
    const calls: Record<string, () => number> = {
      allReduce: () => m.MPI_Allreduce(IN_PLACE, input, n, MPI.FLOAT, MPI.SUM, W),
      reduceScatter: () => m.MPI_Reduce_scatter_block(input, out, part, MPI.FLOAT, MPI.SUM, W),
      allGather: () => m.MPI_Allgather(input, part, MPI.FLOAT, out, part, MPI.FLOAT, W),
      broadcast: () => m.MPI_Bcast(input, n, MPI.FLOAT, 0, W),
      reduce: () => m.MPI_Reduce(input, out, n, MPI.FLOAT, MPI.SUM, 0, W),
      allToAll: () => m.MPI_Alltoall(input, part, MPI.FLOAT, out, part, MPI.FLOAT, W),
    };
    const call = calls[coll];
    if (!call || !Number.isInteger(n)) throw new Error(`mpi_sync_loop: bad case '${spec}' (collective:bytes)`);
    const loop = (minCalls: number, ms: number, maxCalls: number) => {
      const t: number[] = [];
      const elapsed = new Float64Array(1); // the slowest rank's summed call time
      let mine = 0;
      for (let k; (k = nextChunk(t.length, elapsed[0], minCalls, ms, maxCalls)) > 0;) {
        for (let i = 0; i < k; i++) {
          const t0 = performance.now();
          check(call(), coll);
          const dt = performance.now() - t0;
          t.push(dt);
          mine += dt;
        }
        elapsed[0] = mine;
        check(m.MPI_Allreduce(IN_PLACE, elapsed, 1, MPI.DOUBLE, MPI.MAX, W), 'MPI_Allreduce');
      }
      return t;
    };
    const first = loop(warmup, warmupMs, Math.max(warmup, maxIters))[0];
    check(m.MPI_Barrier(W), 'MPI_Barrier');
    const s = summarize(loop(minIters, minMs, maxIters));
    const worst = Float64Array.of(s.min, s.median, s.p90, s.mean, first);
    check(m.MPI_Allreduce(IN_PLACE, worst, 5, MPI.DOUBLE, MPI.MAX, W), 'MPI_Allreduce');
    const [min, median, p90, mean, firstMs] = worst;
    if (rank === 0) console.log(JSON.stringify({ coll, bytes, iters: s.iters, min, median, p90, mean, firstMs }));
  }
  check(m.MPI_Finalize(), 'MPI_Finalize');
}

if (import.meta.main) main(Deno.args);
