/*
 * MPICH's own collectives called in a plain C loop: the floor the comm bench
 * (src/bench/mpi_ref.ts) sets this project's collectives against. Built with
 * mpicc at bench time and run as `mpirun -n p mpi_loop W WMS K MS MAX CASE...`,
 * a CASE being `collective:bytes` (f32 elements, sum, root 0). The loop is
 * comm/timing.ts's: at least W warm-up calls and WMS ms of them, then calls
 * timed one by one (MPI_Wtime) until at least K calls and MS ms (at most MAX),
 * the ranks agreeing between batches (MPI_Allreduce, max) so they stop together.
 * Rank 0 prints one JSON line per case: the slowest rank's min / median / p90 /
 * mean ms per call (nearest-rank percentiles) and its first warm-up call.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int size;

static void call(const char *coll, float *in, float *out, int n) {
  int part = n / size;
  if (!strcmp(coll, "allReduce"))
    MPI_Allreduce(MPI_IN_PLACE, in, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (!strcmp(coll, "reduceScatter"))
    MPI_Reduce_scatter_block(in, out, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (!strcmp(coll, "allGather"))
    MPI_Allgather(in, part, MPI_FLOAT, out, part, MPI_FLOAT, MPI_COMM_WORLD);
  else if (!strcmp(coll, "broadcast"))
    MPI_Bcast(in, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  else if (!strcmp(coll, "reduce"))
    MPI_Reduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  else if (!strcmp(coll, "allToAll"))
    MPI_Alltoall(in, part, MPI_FLOAT, out, part, MPI_FLOAT, MPI_COMM_WORLD);
  else {
    fprintf(stderr, "mpi_loop: unknown collective '%s'\n", coll);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

/* comm/timing.ts nextChunk. */
static long next_chunk(long done, double elapsed, long min_calls, double min_ms, long max_calls) {
  if (done >= max_calls || (done >= min_calls && elapsed >= min_ms)) return 0;
  if (done < min_calls) return min_calls - done < max_calls - done ? min_calls - done : max_calls - done;
  double per_call = elapsed / done > 1e-4 ? elapsed / done : 1e-4;
  long n = (long)ceil((min_ms - elapsed) / per_call * 1.2);
  if (n > max_calls - done) n = max_calls - done;
  return n < 1 ? 1 : n;
}

/* Timed batches until next_chunk stops; returns the count, times in ms in t. */
static long timed_loop(const char *coll, float *in, float *out, int n, long min_calls, double min_ms,
                       long max_calls, double *t) {
  long done = 0, k;
  double mine = 0, elapsed = 0;
  while ((k = next_chunk(done, elapsed, min_calls, min_ms, max_calls)) > 0) {
    for (long i = 0; i < k; i++, done++) {
      double t0 = MPI_Wtime();
      call(coll, in, out, n);
      t[done] = (MPI_Wtime() - t0) * 1e3;
      mine += t[done];
    }
    /* The slowest rank's summed call time. */
    MPI_Allreduce(&mine, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  return done;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 7) {
    if (!rank) fprintf(stderr, "usage: mpi_loop W WMS K MS MAX collective:bytes...\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long warmup = atol(argv[1]), min_iters = atol(argv[3]), max_iters = atol(argv[5]);
  double warmup_ms = atof(argv[2]), min_ms = atof(argv[4]);
  long cap = max_iters > warmup ? max_iters : warmup;
  double *t = malloc(sizeof(double) * cap);
  for (int c = 6; c < argc; c++) {
    char coll[32];
    long bytes;
    if (sscanf(argv[c], "%31[^:]:%ld", coll, &bytes) != 2) {
      if (!rank) fprintf(stderr, "mpi_loop: bad case '%s' (collective:bytes)\n", argv[c]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int n = (int)(bytes / 4);
    float *in = malloc(bytes), *out = malloc(bytes);
    for (int i = 0; i < n; i++) in[i] = out[i] = 1;
    timed_loop(coll, in, out, n, warmup, warmup_ms, cap, t);
    double first = t[0];
    MPI_Barrier(MPI_COMM_WORLD);
    long k = timed_loop(coll, in, out, n, min_iters, min_ms, max_iters, t);
    double sum = 0;
    for (long i = 0; i < k; i++) sum += t[i];
    qsort(t, k, sizeof(double), by_value);
    double s[5] = {t[0], t[(long)ceil(0.5 * k) - 1], t[(long)ceil(0.9 * k) - 1], sum / k, first};
    MPI_Allreduce(MPI_IN_PLACE, s, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (!rank) {
      printf("{\"coll\":\"%s\",\"bytes\":%ld,\"iters\":%ld,\"min\":%.9g,\"median\":%.9g,\"p90\":%.9g,"
             "\"mean\":%.9g,\"firstMs\":%.9g}\n",
             coll, bytes, k, s[0], s[1], s[2], s[3], s[4]);
      fflush(stdout);
    }
    free(in);
    free(out);
  }
  free(t);
  MPI_Finalize();
  return 0;
}
