/**
 * One rank's place in the [dp, pp, cp, tp] DeviceMesh and the model it holds there: its mesh
 * coordinates, the world ranks of each of its groups, the tokens it holds under context
 * parallelism and its ModelStages over its RankContext (tp shard, cp attention), as the mesh
 * trainer (mesh_trainer.ts) builds it for every plan.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { MeshCoords, MeshDim } from '../../comm/mesh.ts';
import type { TrainConfig } from '../../train/config.ts';
import { type ParallelPlan, planGroup, planMesh } from '../plan/plan.ts';
import { subGroup } from '../data/data_parallel.ts';
import { ModelStages } from '../pipeline/stages.ts';
import { RankContext } from './rank_context.ts';
import { cpPositions } from '../context/context_parallel.ts';
import { type FloatCollectives, withCompression } from '../../comm/compressed.ts';
import { type CompressDim, NO_COMPRESSION } from '../../comm/compression.ts';
import { paddedVocabSize, tpVocabConfig } from '../../models/vocab_pad.ts';

/** World ranks of a rank's group along each mesh dimension, its dp·cp sync group and its embedding group. */
export type RankGroups = Record<MeshDim | 'dpcp' | 'embedding', number[]>;

/** What {@link rankModel} builds for one rank. */
export interface RankModel {
  coords: MeshCoords;
  /**
   * World ranks of each mesh group, the gradient-sync group `dpcp` (the dp·cp ranks holding the
   * same shard, dp-major: Megatron's data-parallel group with cp) and the embedding group (first
   * and last pipeline rank when this rank is one of them and they differ, else []).
   */
  groups: RankGroups;
  /** Global positions of this rank's T/cp tokens of every sequence (0…T−1 without cp). */
  positions: Int32Array;
  stages: ModelStages;
  /** The communicator of mesh dimension `dim`, named `dim[ranks]` (the name traffic accounting keys on). */
  comm(dim: MeshDim): Communicator;
  /** The dp·cp gradient-sync communicator, named `dp[…]` (`dpcp[…]` with cp). */
  sync(): Communicator;
  /** The pipeline's point-to-point messages: the pp group under the plan's pp compression. */
  p2p: FloatCollectives;
}

/**
 * Builds rank `world.rank`'s coordinates, groups and model shard for `plan` (every rank calls it
 * with the same arguments). `v` is the number of model chunks per pipeline rank (interleaved).
 * @throws Error from ModelStages (layers not divisible, heads or widths not divisible by tp).
 */
export function rankModel(
  gpu: Gpu,
  cfg: TrainConfig,
  plan: ParallelPlan,
  world: Communicator,
  vocabSize: number,
  v = 1,
): RankModel {
  const rank = world.rank, coords = planMesh(plan, rank).coords();
  const group = (dim: MeshDim) => planGroup(plan, dim, rank);
  const pp = group('pp'), ends = [...new Set([pp[0], pp[pp.length - 1]])];
  const groups: RankGroups = {
    dp: group('dp'),
    pp,
    cp: group('cp'),
    tp: group('tp'),
    dpcp: group('dp').flatMap((r) => planGroup(plan, 'cp', r)),
    embedding: ends.length > 1 && ends.includes(rank) ? ends : [],
  };
  const comms = new Map<string, Communicator>();
  const named = (ranks: number[], id: string) => {
    if (!comms.has(id)) comms.set(id, world.newGroup(ranks, id));
    return comms.get(id)!;
  };
  const comm = (dim: MeshDim) => named(groups[dim], `${dim}[${groups[dim].join(',')}]`);
  const T = cfg.blockSize;
  const positions = plan.cp > 1
    ? cpPositions(plan.cpKind, coords.cp, plan.cp, T)
    : Int32Array.from({ length: T }, (_, i) => i);
  // Each dimension's bulk traffic under the plan's compression policy (compression.ts).
  const compress = plan.compress ?? NO_COMPRESSION;
  const floats = (c: Communicator, dim: CompressDim) => withCompression(c, gpu, compress[dim]);
  const attn = plan.cp > 1 ? subGroup(comm('cp'), 'attn') : null;
  const context = attn ? { group: floats(attn, 'cp'), comm: attn, kind: plan.cpKind, positions } : undefined;
  const act = floats(subGroup(comm('tp'), 'act'), 'tp');
  // --pad-vocab N pads to a multiple of N·tp here (models/vocab_pad.ts): the model's rows V'.
  const modelVocab = paddedVocabSize(vocabSize, cfg.padVocab, plan.tp);
  const ctx = new RankContext({ tp: comm('tp'), vocabSize, modelVocab, sequenceParallel: plan.sp, context, act });
  // Expert parallelism: ep consecutive dp ranks of the same (pp, cp, tp) coordinate (plan.ts planGroup).
  const ep = plan.ep > 1 ? planGroup(plan, 'ep', rank) : null;
  const moe = ep ? floats(subGroup(named(ep, `ep[${ep.join(',')}]`), 'moe'), 'ep') : undefined;
  const stages = new ModelStages(gpu, tpVocabConfig(cfg, plan.tp), vocabSize, ctx, {
    ppRank: coords.pp,
    pp: plan.pp,
    v,
  }, moe);
  const sync = () => named(groups.dpcp, `${plan.cp > 1 ? 'dpcp' : 'dp'}[${groups.dpcp.join(',')}]`);
  return { coords, groups, positions, stages, comm, sync, p2p: floats(comm('pp'), 'pp') };
}
