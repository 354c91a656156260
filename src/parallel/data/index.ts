/**
 * Data parallelism and the gradient sync around it (docs/design.md#parallel-strategies): DDP's overlapped buckets
 * (buckets.ts, data_parallel.ts), the mesh trainer's sync hook (grad_sync.ts), the dp reduction under compression
 * (grad_compression.ts) and low-communication data parallelism — local SGD, DiLoCo — (low_comm.ts, outer_sync.ts).
 */
export * from './buckets.ts';
export * from './data_parallel.ts';
export * from './grad_compression.ts';
export * from './grad_sync.ts';
export * from './low_comm.ts';
export * from './outer_sync.ts';
