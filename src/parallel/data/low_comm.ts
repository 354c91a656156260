/**
 * Low-communication data parallelism (docs/design.md#low-communication-data-parallelism): what `--sync` and its
 * parameters mean, checked once for the plan schema, the trainer and the demo; which fragment synchronises at the end
 * of which inner step; and the exact words one outer synchronisation puts on the wire. Runtime-neutral (no GPU code;
 * the trainer's side is outer_sync.ts).
 *
 * - local SGD (Stich, arXiv 1805.09767): H inner steps, then the workers' parameters averaged.
 * - DiLoCo (Douillard et al., arXiv 2311.08105): H inner steps, then the pseudo-gradient
 *   Δ = θ_global − mean_w θ_w applied by an outer Nesterov SGD (lr 0.7, momentum 0.9).
 * - Streaming DiLoCo (Douillard et al., arXiv 2501.18512): F fragments of layers (strided) whose
 *   syncs are staggered by H/F steps, each overlapping τ inner steps, with low-bit outer gradients.
 * - CO2 (Sun et al., arXiv 2401.16265): every outer allReduce overlaps the whole next inner phase
 *   (its result lands one round late), with a staleness-gap penalty and outer-momentum clipping.
 */
import { z } from 'zod';
import type { Scheme } from '../../comm/compression.ts';
import { compressedPhases, compressedTraffic, phaseAlgorithm, phaseTraffic } from '../../comm/compressed_cost.ts';
import { type Collective, collectiveTraffic, type Traffic } from '../../comm/cost.ts';
import { layerOf } from './buckets.ts';
import type { CommRow } from '../cost/cost.ts';

export const SYNC_METHODS = ['ddp', 'local-sgd', 'diloco', 'streaming-diloco', 'co2'] as const;
export type SyncMethod = typeof SYNC_METHODS[number];
export const OUTER_QUANTS = ['fp32', 'bf16', 'int4'] as const;
export type OuterQuant = typeof OUTER_QUANTS[number];

/** A resolved low-communication method: every parameter set, defaults filled in per method. */
export interface SyncSpec {
  method: Exclude<SyncMethod, 'ddp'>;
  /** H: inner optimizer steps between two synchronisations of a fragment. */
  innerSteps: number;
  /** Outer SGD learning rate (1 with no momentum: plain averaging). */
  outerLr: number;
  /** Nesterov momentum of the outer SGD (0: none). */
  outerMomentum: number;
  /** F: fragments synchronised at staggered steps (1 but for streaming-diloco). */
  fragments: number;
  /** τ: inner steps an outer allReduce overlaps before its result is applied (CO2: H). */
  overlapSteps: number;
  /** Wire format of the outer gradients. */
  outerQuant: OuterQuant;
  /** Streaming DiLoCo: weight α of the local parameters when an overlapped fragment lands (θ ← α·θ_local + (1−α)·θ_global). */
  mixing: number;
  /** CO2: the share of a worker's own not-yet-averaged update it drops when the stale global model lands (1: restart from it). */
  stalenessPenalty: number;
  /** CO2: the outer momentum's norm is clipped to this (0: off). */
  outerClip: number;
}

/** The flags, as the plan schema reads them (unset: the method's default). */
export const SyncFlagsSchema = {
  sync: z.enum(SYNC_METHODS).default('ddp').describe(
    'data-parallel synchronisation: ddp (every step), local-sgd, diloco, streaming-diloco, co2',
  ),
  innerSteps: z.number().int().min(1).max(100_000).optional().describe('H: inner steps per outer step (default 10)'),
  outerLr: z.number().gt(0).max(10).optional().describe('outer SGD learning rate (diloco 0.7; local-sgd 1)'),
  outerMomentum: z.number().min(0).lt(1).optional().describe('outer Nesterov momentum (diloco 0.9; local-sgd 0)'),
  fragments: z.number().int().min(1).max(1024).optional().describe('streaming-diloco: fragments F (default 2)'),
  overlapSteps: z.number().int().min(0).max(100_000).optional().describe(
    'streaming-diloco: inner steps τ a sync overlaps (default 1)',
  ),
  outerQuant: z.enum(OUTER_QUANTS).optional().describe('outer gradients on the wire: fp32, bf16, int4 (block 256)'),
  mixing: z.number().min(0).max(1).optional().describe(
    'streaming-diloco: α of θ ← α·θ_local + (1−α)·θ_global (0.5 with overlap)',
  ),
  stalenessPenalty: z.number().min(0).max(1).optional().describe(
    'co2: share of the unsynchronised update dropped (default 0.5)',
  ),
  outerClip: z.number().min(0).max(1e6).optional().describe('co2: clip the outer momentum to this norm; 0 = off'),
};
type SyncFlags = { [K in keyof typeof SyncFlagsSchema]?: z.infer<typeof SyncFlagsSchema[K]> };

/**
 * The spec `flags` describe (undefined for ddp), defaults filled in per method.
 * @throws Error naming the flag and what is allowed: a parameter the method does not take, H not
 *   divisible by F, τ not below H/F, an outer LR / momentum on local-sgd (it averages).
 */
export function syncSpecOf(flags: SyncFlags): SyncSpec | undefined {
  const method = flags.sync ?? 'ddp';
  const given = (Object.keys(SyncFlagsSchema) as (keyof SyncFlags)[]).filter((k) =>
    k !== 'sync' && flags[k] !== undefined
  );
  const takes: Record<SyncMethod, (keyof SyncFlags)[]> = {
    ddp: [],
    'local-sgd': ['innerSteps', 'outerQuant'],
    diloco: ['innerSteps', 'outerLr', 'outerMomentum', 'outerQuant'],
    'streaming-diloco': ['innerSteps', 'outerLr', 'outerMomentum', 'outerQuant', 'fragments', 'overlapSteps', 'mixing'],
    co2: ['innerSteps', 'outerLr', 'outerMomentum', 'outerQuant', 'stalenessPenalty', 'outerClip'],
  };
  const stray = given.filter((k) => !takes[method].includes(k));
  if (stray.length) {
    throw new Error(
      `--sync ${method} takes no ${stray.map(flagName).join(', ')} (it takes: ${
        takes[method].map(flagName).join(', ') || 'nothing'
      })`,
    );
  }
  if (method === 'ddp') return undefined;
  const H = flags.innerSteps ?? 10, F = method === 'streaming-diloco' ? flags.fragments ?? 2 : 1;
  const averaging = method === 'local-sgd';
  const tau = method === 'co2' ? H : method === 'streaming-diloco' ? flags.overlapSteps ?? 1 : 0;
  if (H % F !== 0) {
    throw new Error(`--inner-steps ${H} must be divisible by --fragments ${F} (syncs are staggered by H/F steps)`);
  }
  if (method === 'streaming-diloco' && tau >= H / F) {
    throw new Error(
      `--overlap-steps ${tau} must be below H/F = ${
        H / F
      }: a fragment's sync must land before the next fragment's starts`,
    );
  }
  return {
    method,
    innerSteps: H,
    outerLr: averaging ? 1 : flags.outerLr ?? 0.7,
    outerMomentum: averaging ? 0 : flags.outerMomentum ?? 0.9,
    fragments: F,
    overlapSteps: tau,
    outerQuant: flags.outerQuant ?? 'fp32',
    mixing: method === 'streaming-diloco' ? flags.mixing ?? (tau > 0 ? 0.5 : 0) : 0,
    stalenessPenalty: method === 'co2' ? flags.stalenessPenalty ?? 0.5 : 0,
    outerClip: method === 'co2' ? flags.outerClip ?? 0 : 0,
  };
}

const flagName = (k: string) => `--${k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())}`;

/** One line such as `diloco H 10 · outer lr 0.7 · momentum 0.9`. */
export function describeSync(s: SyncSpec): string {
  const parts = [`${s.method} H ${s.innerSteps}`, `outer lr ${s.outerLr}`, `momentum ${s.outerMomentum}`];
  if (s.method === 'streaming-diloco') {
    parts.push(`${s.fragments} fragments`, `overlap ${s.overlapSteps}`, `mixing ${s.mixing}`);
  }
  if (s.method === 'co2') parts.push(`staleness penalty ${s.stalenessPenalty}`, `clip ${s.outerClip || 'off'}`);
  if (s.outerQuant !== 'fp32') parts.push(`${s.outerQuant} outer gradients`);
  return parts.join(' · ');
}

/**
 * Fragment of a parameter: its layer index (`h.3.` → 3) mod F — Streaming DiLoCo's strided
 * fragments; parameters outside the layer stack (embeddings, the final norm) go to fragment 0.
 */
export function fragmentOf(name: string, fragments: number): number {
  const layer = layerOf(name);
  return layer === null ? 0 : Number(layer.slice(layer.lastIndexOf('.') + 1)) % fragments;
}

/** Fragments whose outer allReduce starts at the end of 0-based step `s` (fragment f at (s + 1) mod H = f·H/F). */
export function syncsAt(spec: SyncSpec, s: number): number[] {
  const { innerSteps: H, fragments: F } = spec, out: number[] = [];
  for (let f = 0; f < F; f++) if ((s + 1) % H === (f * H / F) % H && s + 1 >= (f === 0 ? H : f * H / F)) out.push(f);
  return out;
}

/** The compression scheme of the outer gradients (the block-256 int4 of comm/compression.ts). */
export function outerScheme(q: OuterQuant): Scheme {
  return q === 'fp32' ? { kind: 'none' } : q === 'bf16' ? { kind: 'bf16' } : { kind: 'int4', block: 256 };
}

/**
 * What group rank `r` of `p` sends in one outer allReduce of an `n`-element fragment (elements,
 * 4 bytes each; packed words when quantised): the ring allReduce of comm/algorithms.ts, or the
 * compressed two-phase allReduce of comm/compressed.ts.
 */
export function outerSyncTraffic(spec: SyncSpec, n: number, p: number, r: number): Traffic {
  const s = outerScheme(spec.outerQuant);
  return s.kind === 'none'
    ? collectiveTraffic('allReduce', 'ring', n, p, r)
    : compressedTraffic('allReduce', s, n, p, r);
}

/**
 * The outer loop's traffic per inner step, averaged, of a rank holding `n` parameter elements in
 * dp group `group` (world ranks): F fragments of about n/F elements every H steps, one row per
 * word-level call (a quantised allReduce is an allToAll and an allGather, comm/compressed.ts).
 * Marked inexact — fragments differ in size and a run's last step synchronises every fragment —
 * so the accounting sets them beside the measured figures without claiming equality.
 */
export function outerSyncRows(spec: SyncSpec, n: number, group: number[], rank: number): CommRow[] {
  const F = spec.fragments, nf = Math.ceil(n / F), p = group.length, r = group.indexOf(rank);
  const perStep = F / spec.innerSteps;
  return compressedPhases('allReduce', outerScheme(spec.outerQuant), nf, p).map(([call, w]) => {
    const t = phaseTraffic([call, w], p, r);
    return {
      dim: 'dp' as const,
      what: `outer sync (${spec.method}), average per inner step`,
      collective: call as Collective,
      algorithm: phaseAlgorithm(call),
      group,
      calls: perStep,
      n: w,
      elements: t.elements * perStep,
      messages: t.messages * perStep,
      exact: false,
      scheme: spec.outerQuant,
    };
  });
}
