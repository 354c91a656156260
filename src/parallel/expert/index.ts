/**
 * Expert parallelism (docs/design.md#moe-under-dp-and-zero): one MoE MLP across an ep group, its tokens
 * exchanged all-to-all (expert_exchange.ts), and how a split run's routing differs from one token group per micro-batch
 * (moe_routing.ts).
 */
export * from './expert_exchange.ts';
export * from './moe_routing.ts';
