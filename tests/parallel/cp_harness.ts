/**
 * Context-parallel test harness: worlds of tests/parallel/cp_worker.ts (bundled once per test
 * process, as harness.ts does for the dp worker) and the argument / result types the worker
 * and tests/parallel/context_parallel.test.ts share.
 */
import type { World } from '../../src/comm/launch.ts';
import type { CpKind } from '../../src/parallel/plan/plan.ts';
import type { Sent } from '../../src/parallel/mesh/traffic.ts';
import { withRankWorld } from '../comm/world.ts';

/** One attention call on every rank: full qkv (B, T, 3C) and dy (B, T, C) drawn from `seed`. */
export interface AttnArgs {
  kind: CpKind;
  b: number;
  t: number;
  c: number;
  nh: number;
  causal: boolean;
  seed: number;
}

/** What a rank computed for its rows (global positions `pos`) and what it sent. */
export interface AttnResult {
  pos: number[];
  y: Float32Array;
  dqkv: Float32Array;
  sentForward: Sent;
  sentBackward: Sent;
}

/** Launches `size` cp workers (see {@link withRankWorld}). */
export const withCpWorld = <T>(size: number, body: (w: World) => Promise<T>): Promise<T> =>
  withRankWorld('cp_worker.ts', size, body);
