/**
 * MPICH through Deno FFI (docs/design.md#binding): the handful of MPI-3 calls the MPI wire and the
 * MPI-native collectives need, with MPICH's handle values (plain ints, from Debian's mpich 4
 * mpi.h). Calls that can wait on peers are declared `nonblocking`, so they run on a Deno
 * blocking thread and the event loop keeps going — which is why MPI is initialised with
 * MPI_THREAD_MULTIPLE.
 *
 * Deno-only (FFI); the browser never loads this module.
 */

/** MPICH handles and constants (mpi.h). */
export const MPI = {
  COMM_WORLD: 0x44000000,
  COMM_NULL: 0x04000000,
  BYTE: 0x4c00010d,
  INT: 0x4c000405,
  FLOAT: 0x4c00040a,
  DOUBLE: 0x4c00080b,
  MAX: 0x58000001,
  MIN: 0x58000002,
  SUM: 0x58000003,
  ANY_SOURCE: -2,
  /** The color of a rank that joins none of a split's communicators. */
  UNDEFINED: -32766,
  INFO_NULL: 0x1c000000,
  COMM_TYPE_SHARED: 1,
  THREAD_MULTIPLE: 3,
  SUCCESS: 0,
  /** sizeof(MPI_Status): count_lo, count_hi_and_cancelled, MPI_SOURCE, MPI_TAG, MPI_ERROR. */
  STATUS_INTS: 5,
} as const;

const SYMBOLS = {
  MPI_Initialized: { parameters: ['buffer'], result: 'i32' },
  MPI_Finalized: { parameters: ['buffer'], result: 'i32' },
  MPI_Init_thread: { parameters: ['pointer', 'pointer', 'i32', 'buffer'], result: 'i32', nonblocking: true },
  MPI_Finalize: { parameters: [], result: 'i32', nonblocking: true },
  MPI_Abort: { parameters: ['i32', 'i32'], result: 'i32' },
  MPI_Comm_rank: { parameters: ['i32', 'buffer'], result: 'i32' },
  MPI_Comm_size: { parameters: ['i32', 'buffer'], result: 'i32' },
  MPI_Comm_split: { parameters: ['i32', 'i32', 'i32', 'buffer'], result: 'i32', nonblocking: true },
  MPI_Comm_free: { parameters: ['buffer'], result: 'i32' },
  MPI_Comm_split_type: { parameters: ['i32', 'i32', 'i32', 'i32', 'buffer'], result: 'i32', nonblocking: true },
  MPI_Error_string: { parameters: ['i32', 'buffer', 'buffer'], result: 'i32' },
  MPI_Isend: { parameters: ['buffer', 'i32', 'i32', 'i32', 'i32', 'i32', 'buffer'], result: 'i32' },
  MPI_Test: { parameters: ['buffer', 'buffer', 'pointer'], result: 'i32' },
  MPI_Waitall: { parameters: ['i32', 'buffer', 'pointer'], result: 'i32', nonblocking: true },
  MPI_Improbe: { parameters: ['i32', 'i32', 'i32', 'buffer', 'buffer', 'buffer'], result: 'i32' },
  MPI_Mrecv: { parameters: ['buffer', 'i32', 'i32', 'buffer', 'pointer'], result: 'i32' },
  MPI_Get_count: { parameters: ['buffer', 'i32', 'buffer'], result: 'i32' },
  MPI_Barrier: { parameters: ['i32'], result: 'i32', nonblocking: true },
  MPI_Allreduce: { parameters: ['pointer', 'buffer', 'i32', 'i32', 'i32', 'i32'], result: 'i32', nonblocking: true },
  MPI_Reduce_scatter_block: {
    parameters: ['buffer', 'buffer', 'i32', 'i32', 'i32', 'i32'],
    result: 'i32',
    nonblocking: true,
  },
  MPI_Allgather: {
    parameters: ['buffer', 'i32', 'i32', 'buffer', 'i32', 'i32', 'i32'],
    result: 'i32',
    nonblocking: true,
  },
  MPI_Alltoall: {
    parameters: ['buffer', 'i32', 'i32', 'buffer', 'i32', 'i32', 'i32'],
    result: 'i32',
    nonblocking: true,
  },
  MPI_Bcast: { parameters: ['buffer', 'i32', 'i32', 'i32', 'i32'], result: 'i32', nonblocking: true },
  MPI_Reduce: {
    parameters: ['buffer', 'buffer', 'i32', 'i32', 'i32', 'i32', 'i32'],
    result: 'i32',
    nonblocking: true,
  },
} as const satisfies Deno.ForeignLibraryInterface;

export type MpiSymbols = Deno.DynamicLibrary<typeof SYMBOLS>['symbols'];

/** Where Debian's mpich puts the library (`apt-get install mpich`); the soname is tried first. */
export const CANDIDATES = ['libmpich.so.12', '/usr/lib/x86_64-linux-gnu/libmpich.so.12', 'libmpi.so.12'];

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/**
 * The MPI symbols, loading libmpich on first use (from `paths`, first that loads).
 * @throws Error naming the libraries tried and the package to install when none loads.
 */
export function mpi(paths: readonly string[] = CANDIDATES): MpiSymbols {
  if (lib) return lib.symbols;
  const errors: string[] = [];
  for (const path of paths) {
    try {
      lib = Deno.dlopen(path, SYMBOLS);
      return lib.symbols;
    } catch (e) {
      errors.push(`${path}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(
    `MPI is not installed: could not load MPICH (${
      errors.join('; ')
    }); install it with 'apt-get install mpich libmpich-dev'`,
  );
}

/** A pointer-typed argument holding the integer `v` (MPI_STATUS_IGNORE is 1, MPI_IN_PLACE −1). */
export function constPointer(v: bigint): Deno.PointerValue {
  return Deno.UnsafePointer.create(BigInt.asUintN(64, v));
}
export const STATUS_IGNORE = constPointer(1n);
export const IN_PLACE = constPointer(-1n);

/**
 * Throws unless an MPI call returned MPI_SUCCESS.
 * @throws Error "MPI_<call> failed: <MPI's error string> (code N)".
 */
export function check(rc: number, call: string): void {
  if (rc === MPI.SUCCESS) return;
  let text = '';
  try {
    const buf = new Uint8Array(512), len = new Int32Array(1);
    mpi().MPI_Error_string(rc, buf, len);
    text = new TextDecoder().decode(buf.subarray(0, len[0]));
  } catch { /* the code alone is still worth reporting */ }
  throw new Error(`${call} failed: ${text || 'unknown error'} (code ${rc})`);
}

/** One int out-parameter: calls `fn(buf)` and returns buf[0]. */
export function intOut(fn: (buf: Int32Array) => number, call: string): number {
  const buf = new Int32Array(1);
  check(fn(buf), call);
  return buf[0];
}
