/**
 * The planner's view of the architectures other than GPT (docs/design.md §17, §23): each rank's
 * parameters counted from the model's own declarations through the same placement the ranks use
 * (stages.ts stagePlacement, tp_table.ts), so `npm run plan`, the memory table and the dp
 * traffic are exact for mamba, hybrid and linear as they are for GPT's closed formulas.
 */
import type { TrainConfig } from '../train/config.ts';
import type { ParamSpec } from '../nn/params.ts';
import { paramSpecsOf, PIECES } from '../models/registry.ts';
import type { Piece } from '../models/model.ts';
import { dtRank } from '../models/mamba.ts';
import { type ArchLayout, type ParallelPlan, planMesh, type RankParams } from './plan.ts';
import { stagePlacement } from './stages.ts';
import { tpRole } from './tp_table.ts';

/**
 * The layout of `cfg.arch` for the planner, or undefined for GPT (its formulas) and the MoE
 * models (not written as pieces yet).
 */
export function archLayout(cfg: TrainConfig, vocabSize: number): ArchLayout | undefined {
  const arch = cfg.arch;
  if (arch !== 'linear' && arch !== 'mamba' && arch !== 'hybrid') return undefined;
  const specs = paramSpecsOf(cfg, vocabSize)!;
  return {
    arch,
    params: (plan, rank) => placedParams(specs, arch, cfg.nLayer, plan, rank),
    dtRank: dtRank(cfg.nEmbd),
    dState: cfg.dState,
    attnEvery: cfg.attnEvery,
  };
}

/** Σ of the shapes rank `rank` holds: every parameter, the tied embedding's slice, the replicated ones (sp). */
function placedParams(specs: ParamSpec[], arch: string, nLayer: number, plan: ParallelPlan, rank: number): RankParams {
  const c = planMesh(plan).coords(rank), v = plan.schedule === 'interleaved' ? plan.virtualStages : 1;
  const place = stagePlacement(arch, nLayer, { ppRank: c.pp, pp: plan.pp, v }, plan.tp, c.tp);
  const pieceOf = PIECES[arch as keyof typeof PIECES] as (n: string) => Piece;
  const out: RankParams = { dense: 0, expert: 0, spReplicated: 0, embedding: 0 };
  for (const s of specs) {
    const at = place(s);
    if (!at) continue;
    const n = at.shape.reduce((a, b) => a * b, 1);
    out.dense += n;
    if (pieceOf(s.name) === 'tied') out.embedding = n;
    if (pieceOf(s.name) === 'shared') out.shared = (out.shared ?? 0) + n;
    if (plan.tp > 1 && tpRole(s.name) === 'replicated') out.spReplicated += n;
  }
  return out;
}
