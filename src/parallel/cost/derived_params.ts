/**
 * Parameters per rank counted from the model itself (docs/design.md#accounting-derived-from-the-model): a
 * rank's ModelStages (pipeline/stages.ts), the object every parallel trainer builds, is built over
 * a meta GPU (gpu/meta.ts: shapes only, no device, no weights drawn) and a world whose transport
 * refuses every message (construction communicates nothing), and its ParamStore is read. What a
 * rank keeps is therefore whatever the architecture's pieces, its split declaration
 * (tp_table.ts) and the stage placement say, with no second description to keep in step.
 *
 * Counts depend on the tensor-parallel degree, the pipeline layout (pp, v, the rank's stage) and
 * the rank's expert shard only: each distinct one is built once and cached per config object, so
 * a plan search pricing thousands of plans builds a few dozen meta models.
 */
import type { TrainConfig } from '../../train/config.ts';
import { MetaGpu } from '../../gpu/meta.ts';
import { Communicator } from '../../comm/communicator.ts';
import { Transport } from '../../comm/transport.ts';
import type { Wire } from '../../comm/wire.ts';
import { ModelStages, stageKeeps } from '../pipeline/stages.ts';
import { RankContext } from '../mesh/rank_context.ts';
import { paddedVocabSize } from '../../models/vocab_pad.ts';
import { expertOf } from '../../models/moe_specs.ts';
import { MOE_ARCHS, piecesOf, pipelineBlocks } from '../../models/registry.ts';
import { tpRole } from '../tensor/tp_table.ts';
import { type ParallelPlan, planMesh, type PlanModel, type RankParams } from '../plan/plan.ts';
import { parseConfig } from '../../train/config.ts';

/**
 * World rank `rank` of `worldSize` on a wire that carries nothing: groups can be made (newGroup is
 * local), any message throws. What a rank's model is built over when only its shapes are wanted.
 * @throws Error for a rank outside the world.
 */
export function silentWorld(rank: number, worldSize: number): Communicator {
  const wire: Wire = {
    worldSize,
    post(dst) {
      throw new Error(`silent world: rank ${rank} tried to send to rank ${dst}; building a model must not communicate`);
    },
    listen() {},
    close() {},
  };
  return Communicator.world(new Transport(rank, wire, { trace: false }));
}

/**
 * The ModelStages of a rank at tensor-parallel rank 0, pipeline rank `ppRank` of `pp` (v chunks
 * each) and expert-parallel index `epIndex` of `ep`, built over a fresh meta GPU. `cfg` is the
 * config a rank builds from (tpVocabConfig already applied, as rankModel passes it), `vocabSize`
 * the tokenizer's V.
 * @throws Error from ModelStages (a split the model does not take).
 */
export function metaStages(
  cfg: TrainConfig,
  vocabSize: number,
  at: { tp: number; pp: number; v: number; ppRank: number; ep: number; epIndex: number },
): ModelStages {
  const gpu = new MetaGpu();
  // Only the groups the stages read are made: tp (ranks 0…tp−1 of a tp-only world) and ep.
  const tp = silentWorld(0, at.tp);
  const ctx = new RankContext({ tp, vocabSize, modelVocab: paddedVocabSize(vocabSize, cfg.padVocab) });
  const ep = at.ep > 1 ? silentWorld(at.epIndex, at.ep) : undefined;
  return new ModelStages(gpu, cfg, vocabSize, ctx, { ppRank: at.ppRank, pp: at.pp, v: at.v }, ep);
}

/** A parameter of a built rank model, as the counts read it. */
interface Held {
  name: string;
  size: number;
}

/** The {@link RankParams} of the parameters `held` of architecture `arch` split over `tp` ranks. */
export function countParams(held: readonly Held[], arch: string, tp: number): RankParams {
  const pieceOf = piecesOf(arch), out: RankParams = { dense: 0, expert: 0, spReplicated: 0, embedding: 0 };
  for (const p of held) {
    // Replicated over tp: under sp each rank's copy sees its rows only, a partial gradient summed over tp.
    if (tp > 1 && tpRole(p.name) === 'replicated') out.spReplicated += p.size;
    if (expertOf(p.name)) {
      out.expert += p.size;
      continue;
    }
    out.dense += p.size;
    if (pieceOf(p.name) === 'tied') out.embedding = p.size;
    if (pieceOf(p.name) === 'shared') out.shared = (out.shared ?? 0) + p.size;
  }
  return out;
}

/**
 * This rank's parameters under `plan`, counted from its model (see the module doc). The model of
 * a tensor-parallel rank (with its expert shard) is built once with every block (pp = 1); a
 * pipeline rank's share of it is what stages.ts stageKeeps keeps, as its own ModelStages would
 * (tests/parallel/derived_params.test.ts builds those too and compares). Cached per (tp, ep
 * shard) build and per (pp, v, stage) count in the returned function.
 * @throws Error from ModelStages for a split the model does not take.
 */
export function derivedRankParams(
  cfg: TrainConfig,
  vocabSize: number,
): (plan: ParallelPlan, rank: number) => RankParams {
  const builds = new Map<string, Held[]>(), counts = new Map<string, RankParams>();
  const moe = (MOE_ARCHS as readonly string[]).includes(cfg.arch), nLayer = pipelineBlocks(cfg);
  return (plan, rank) => {
    const c = planMesh(plan).coords(rank), v = plan.schedule === 'interleaved' ? plan.virtualStages : 1;
    const ep = moe ? plan.ep : 1, epIndex = moe ? c.dp % plan.ep : 0, shard = `${plan.tp},${ep},${epIndex}`;
    const key = `${shard},${plan.pp},${v},${c.pp}`;
    let out = counts.get(key);
    if (!out) {
      let whole = builds.get(shard);
      if (!whole) {
        const at = { tp: plan.tp, pp: 1, v: 1, ppRank: 0, ep, epIndex };
        whole = metaStages(cfg, vocabSize, at).params.params.map((p) => ({ name: p.name, size: p.size }));
        builds.set(shard, whole);
      }
      const keeps = stageKeeps(cfg.arch, nLayer, { pp: plan.pp, v, ppRank: c.pp });
      counts.set(key, out = countParams(whole.filter((p) => keeps(p.name)), cfg.arch, plan.tp));
    }
    return { ...out };
  };
}

const gptCounts = new Map<string, (plan: ParallelPlan, rank: number) => RankParams>();

/**
 * The parameters per rank of a model known only by its shape (a plan preset, src/perf/model_presets.ts):
 * the GPT of src/models/gpt.ts (gpt-moe with `model.nExpert`) of that shape, counted as
 * {@link derivedRankParams} counts, `model.vocabSize` rows. One counter per shape and `bias`.
 * @throws Error when the shape is not a valid model config (train/config.ts parseConfig names why).
 */
export function shapeRankParams(model: PlanModel, bias: boolean): (plan: ParallelPlan, rank: number) => RankParams {
  const { nLayer, nHead, nEmbd, blockSize, vocabSize, nExpert, moeEvery } = model;
  const key = JSON.stringify([nLayer, nHead, nEmbd, blockSize, vocabSize, nExpert, moeEvery, bias]);
  let f = gptCounts.get(key);
  if (!f) {
    const moe = nExpert ? { arch: 'gpt-moe', nExpert, moeEvery: moeEvery ?? 1 } : { arch: 'gpt' };
    gptCounts.set(
      key,
      f = derivedRankParams(parseConfig({ nLayer, nHead, nEmbd, blockSize, bias, ...moe }), vocabSize),
    );
  }
  return f;
}
