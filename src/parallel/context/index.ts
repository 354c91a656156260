/**
 * Context parallelism (docs/design.md#parallel-strategies): which tokens of every sequence a cp rank holds
 * (context_parallel.ts), and attention over them by ring attention (ring_attention.ts) or DeepSpeed-Ulysses all-to-all
 * (ulysses.ts).
 */
export * from './context_parallel.ts';
export * from './ring_attention.ts';
export * from './ulysses.ts';
