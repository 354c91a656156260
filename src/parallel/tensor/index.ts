/**
 * Tensor and sequence parallelism (Megatron-LM; docs/design.md#tensor-parallelism): the role of every parameter
 * under tp (tp_table.ts), the conjugate f / g collectives as autograd functions (tp_comm.ts), sequence parallelism's
 * partial gradients (sequence_parallel.ts) and token shift (sp_shift.ts), the vocab-parallel embedding and cross-entropy
 * (vocab_parallel.ts) and a row-parallel layer's bias (row_bias.ts).
 */
export * from './row_bias.ts';
export * from './sequence_parallel.ts';
export * from './sp_shift.ts';
export * from './tp_comm.ts';
export * from './tp_table.ts';
export * from './vocab_parallel.ts';
