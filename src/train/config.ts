/**
 * The training configuration: one flat typed object (nanoGPT's train.py globals), validated
 * with zod so every bad value is reported with its name and the allowed range.
 */
import { z } from 'zod';
import { SCHEDULE_KINDS, scheduleFromConfig, validateSchedule } from './schedules.ts';
import { ARCH_NAMES, ATTENTION_ARCHS } from '../models/archs.ts';
import { parseDataSpec } from '../data/mixture.ts';
import { type Precision, PRECISIONS } from '../autograd/autocast.ts';

export type { Precision };

const int = (min: number) => z.number().int().min(min);
const pos = z.number().positive();

/**
 * Upper bounds of the keys that size allocations, checked before anything is allocated so a
 * typo (`--n-embd 1e9`) is an error naming the key rather than an out-of-memory crash.
 * Generous: far beyond what this sandbox trains, within what the analytical plan can model.
 */
export const CONFIG_MAXIMA = {
  nLayer: 1024,
  nEmbd: 65_536,
  blockSize: 131_072,
  batchSize: 65_536,
  gradAccum: 65_536,
  dState: 1024,
  expand: 64,
  nExpert: 4096,
  padVocab: 65_536,
  recurIters: 256,
} as const;

export const TrainConfigSchema = z.object({
  // ---- model -------------------------------------------------------------
  arch: z.enum(ARCH_NAMES).default('gpt').describe('model family (src/models/registry.ts)'),
  nLayer: int(1).max(CONFIG_MAXIMA.nLayer).default(2).describe('transformer blocks'),
  nHead: int(1).default(2).describe('attention heads; must divide nEmbd'),
  nEmbd: int(1).max(CONFIG_MAXIMA.nEmbd).default(64).describe('width C'),
  blockSize: int(1).max(CONFIG_MAXIMA.blockSize).default(64).describe('context length T'),
  bias: z.boolean().default(true).describe('biases in Linear layers'),
  attention: z.enum(['flash', 'naive']).default('flash').describe(
    'attention kernel: FlashAttention-2 or the materialised T×T one',
  ),
  recompute: z.enum(['none', 'selective', 'full']).default('none').describe(
    'activation recomputation: full re-runs each block in backward from its input; selective only the attention / recurrent mixer cores',
  ),
  precision: z.enum(PRECISIONS).default('f32').describe(
    'f32, or f32 master weights and AdamW state with the linear layers in f16 (f16-mixed: shader-f16, dynamic loss scaling) or bf16 (bf16-mixed: emulated on any adapter)',
  ),
  lossScale: pos.default(65_536).describe('f16-mixed: the first dynamic loss scale (halves on overflow)'),
  lossScaleWindow: int(1).default(2000).describe('f16-mixed: clean steps before the loss scale doubles'),
  linearDecay: z.enum(['head', 'channel']).default('head').describe(
    'linear: decay per head (chunked kernel) or per channel with bonus u (recurrent, RWKV-6)',
  ),
  dState: int(1).max(CONFIG_MAXIMA.dState).default(16).describe('mamba/hybrid: SSM state size N per channel'),
  expand: int(1).max(CONFIG_MAXIMA.expand).default(2).describe('mamba/hybrid: inner width = expand · nEmbd'),
  dConv: int(1).default(4).describe('mamba/hybrid: causal conv1d kernel size'),
  nExpert: int(1).max(CONFIG_MAXIMA.nExpert).default(4).describe('gpt-moe, mamba-moe: experts per MoE layer'),
  moeTopK: z.union([z.literal(1), z.literal(2)]).default(1).describe(
    'gpt-moe, mamba-moe: experts per token (1 = Switch, 2 = GShard/Mixtral)',
  ),
  capacityFactor: pos.default(1.25).describe(
    'gpt-moe, mamba-moe: expert capacity = ⌈factor · k · tokens / experts⌉; overflow tokens are dropped',
  ),
  auxLossWeight: z.number().min(0).default(0.01).describe(
    'gpt-moe, mamba-moe: weight α of the load-balancing loss α·E·Σ f_e·P_e',
  ),
  moeEvery: int(1).default(1).describe('gpt-moe, mamba-moe: every moeEvery-th block has an MoE MLP'),
  attnEvery: int(1).default(2).describe('hybrid: the shared attention block runs after every attnEvery-th Mamba layer'),
  // Recurrent depth (Geiping et al., arXiv 2502.05171; docs/design.md#recurrent-depth): nLayer = prelude + core + coda
  // blocks.
  preludeLayers: int(0).default(1).describe('recurrent-depth: GPT blocks P of the prelude, run once on the embeddings'),
  codaLayers: int(0).default(1).describe('recurrent-depth: GPT blocks Q of the coda, run once before the head'),
  recurIters: int(1).max(CONFIG_MAXIMA.recurIters).default(4).describe(
    'recurrent-depth: mean r of the core iterations drawn per training step (log-normal Poisson, r ≥ 1)',
  ),
  recurSigma: z.number().min(0).max(4).default(0.5).describe(
    "recurrent-depth: σ of the log-normal rate of the r distribution (the paper's 0.5)",
  ),
  recurBackprop: int(1).default(8).describe(
    'recurrent-depth: truncated backprop, gradients through the last k core iterations only',
  ),
  recurInject: z.boolean().default(true).describe(
    'recurrent-depth: input injection, core input = adapter(concat(state, prelude output)) with state₀ = 0; off: state₀ = prelude output, no adapter',
  ),
  evalIterations: int(0).max(CONFIG_MAXIMA.recurIters * 16).default(0).describe(
    'recurrent-depth: core iterations r of evaluation and sampling forwards; 0 = recurIters',
  ),
  tokenizer: z.enum(['char', 'gpt2']).default('char').describe('char-level or GPT-2 BPE'),
  // nanoGPT pads GPT-2's 50257 to 50304: a vocabulary that fills whole GEMM tiles runs faster
  // (`npm run plan -- --advise`). Padded ids are masked out of the softmax and sampling
  // (src/models/vocab_pad.ts); under tp the multiple is N·tp.
  padVocab: int(1).max(CONFIG_MAXIMA.padVocab).default(1).describe(
    'pad the vocabulary to a multiple of N (embedding and LM head rows; padded ids never produced); 1 = off',
  ),
  // ---- data --------------------------------------------------------------
  data: z.string().min(1).default('public/data/tinyshakespeare.txt').describe(
    'UTF-8 text file, or a weighted mixture a.txt:0.95,b.txt:0.05 (char vocabulary over all files)',
  ),
  valFraction: z.number().gt(0).lt(1).default(0.1).describe('tail share held out for validation'),
  // ---- optimisation ------------------------------------------------------
  batchSize: int(1).max(CONFIG_MAXIMA.batchSize).default(16).describe('sequences per micro-batch B'),
  gradAccum: int(1).max(CONFIG_MAXIMA.gradAccum).default(1).describe('micro-batches per optimizer step'),
  steps: int(1).default(600).describe('optimizer steps (max_iters)'),
  lr: pos.default(3e-3).describe('peak learning rate'),
  minLr: z.number().min(0).default(3e-4).describe('floor of the cosine decay / end of a cooldown'),
  warmup: int(0).default(50).describe('linear warmup steps (re-warm length for rewarm-cosine)'),
  decaySteps: int(0).default(0).describe('step where the cosine decay ends; 0 = at `steps`'),
  schedule: z.enum(SCHEDULE_KINDS).default('cosine').describe(
    "LR schedule (src/train/schedules.ts); cosine = nanoGPT's",
  ),
  cooldownFrac: z.number().min(0).max(1).default(0.2).describe(
    'wsd/constant: share of `steps` spent cooling down (Hägele et al. use 0.2)',
  ),
  cooldownShape: z.enum(['linear', 'sqrt']).default('linear').describe('wsd/constant cooldown: linear or 1−sqrt'),
  rewarmStart: int(-1).default(-1).describe(
    "rewarm-cosine: step the re-warm starts; −1 = the checkpoint's step on --resume (0 fresh)",
  ),
  rewarmFrom: z.number().min(-1).default(-1).describe(
    "rewarm-cosine: LR it starts from; −1 = the resumed run's LR at that step, 0 = from zero",
  ),
  // Goldfish loss (Hans et al. arXiv 2406.10209): drop 1/k of training targets, chosen by a hash
  // of the h preceding tokens, so verbatim passages are never fully learned. 0 = off; k = 1 would drop all.
  goldfishK: int(0).refine((k) => k !== 1, 'must be 0 (off) or at least 2').default(0).describe(
    'goldfish loss: drop 1/k of targets; 0 = off',
  ),
  goldfishH: int(1).default(13).describe("context tokens hashed per decision (the paper's h = 13)"),
  // NEFTune (Jain et al. arXiv 2310.05914): U(−1, 1)·α/√(T·C) noise on the input embeddings, training passes only.
  neftuneAlpha: z.number().min(0).default(0).describe('NEFTune noise α (the paper uses 5–15); 0 = off'),
  optimizer: z.enum(['adamw', 'sgd']).default('adamw').describe(
    'update rule: adamw, or plain sgd (no momentum; linear in the gradient, as local SGD theory assumes)',
  ),
  weightDecay: z.number().min(0).default(0.1).describe('AdamW decoupled decay (matrices only)'),
  beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW β1'),
  beta2: z.number().min(0).lt(1).default(0.99).describe('AdamW β2'),
  eps: pos.default(1e-8).describe('AdamW ε'),
  gradClip: z.number().min(0).default(1).describe('global-norm clip; 0 = off'),
  // ---- evaluation, logging, sampling ---------------------------------------
  evalInterval: int(1).default(100).describe('steps between validation runs'),
  evalBatches: int(1).default(10).describe('fixed validation batches averaged per evaluation'),
  logInterval: int(1).default(10).describe('steps per log line (and per GPU readback)'),
  ckptInterval: int(0).default(100).describe('steps between checkpoints; 0 = only at the end'),
  ckptSchedule: z.enum(['interval', 'pythia']).default('interval').describe(
    'pythia: also keep ckpt-<step> files at steps 1, 2, 4 … 512 and every ckptInterval',
  ),
  sampleTokens: int(0).default(200).describe('tokens generated in the final sample'),
  temperature: pos.default(0.8).describe('sampling temperature'),
  topK: int(0).default(40).describe('0 = no top-k filter'),
  // Top-k attention at inference (arXiv 2502.06766): each query's softmax over its k largest
  // scores only, selected exactly (kernels/select_k.ts). Training is never affected.
  topkAttention: int(0).default(0).describe(
    'evaluation and sampling: each query attends to its k largest scores only (exact select-k); 0 = all',
  ),
  seed: int(0).default(1337).describe('seeds weights, batches and sampling'),
  peakTflops: z.number().min(0).default(0).describe('device peak for MFU; 0 = unknown (not printed)'),
});

export type TrainConfig = z.infer<typeof TrainConfigSchema>;

/** Named presets. `tiny` is sized to finish on a 2-core CPU machine in minutes. */
export const PRESETS: Record<string, Partial<TrainConfig>> = {
  tiny: {},
  // nanoGPT's CPU command for shakespeare_char (its README, "I only have a macbook"):
  // config/train_shakespeare_char.py with --block_size=64 --batch_size=12 --n_layer=4
  // --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --eval_iters=20
  // --log_interval=1, on train.py's defaults (bias = False, grad_clip 1.0, weight_decay 0.1,
  // beta1 0.9). nanoGPT has no dropout here either, so nothing is left out.
  'nanogpt-cpu': {
    nLayer: 4,
    nHead: 4,
    nEmbd: 128,
    blockSize: 64,
    bias: false,
    batchSize: 12,
    gradAccum: 1,
    lr: 1e-3,
    minLr: 1e-4,
    steps: 2000,
    decaySteps: 2000,
    warmup: 100,
    weightDecay: 0.1,
    beta1: 0.9,
    beta2: 0.99,
    gradClip: 1,
    evalInterval: 250,
    evalBatches: 20,
    logInterval: 1,
    ckptInterval: 250,
  },
};

/**
 * Keys an architecture sets where the schema's default would not run, given the keys a user set
 * (`given`: the preset, --config file and flags merged). Recurrent depth needs nLayer ≥ prelude +
 * 1 + coda (docs/design.md#recurrent-depth), which the default 2 layers are not: an unset nLayer becomes
 * prelude + 1 + coda, one core block. A given key is never replaced, so an explicit bad value is
 * still refused by {@link parseConfig}.
 */
export function archDefaults(given: Record<string, unknown>): Record<string, unknown> {
  if (given.arch !== 'recurrent-depth' || given.nLayer !== undefined) return {};
  const prelude = given.preludeLayers ?? TrainConfigSchema.shape.preludeLayers.parse(undefined);
  const coda = given.codaLayers ?? TrainConfigSchema.shape.codaLayers.parse(undefined);
  return typeof prelude === 'number' && typeof coda === 'number' ? { nLayer: prelude + 1 + coda } : {};
}

/**
 * Validates a partial config on top of the defaults.
 * @throws Error with one line per problem: `name: message`.
 */
export function parseConfig(input: Record<string, unknown>): TrainConfig {
  const r = TrainConfigSchema.strict().safeParse(input);
  if (!r.success) {
    const lines = r.error.issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`);
    throw new Error(`Invalid config: ${lines.join('; ')}`);
  }
  const cfg = r.data;
  if (cfg.nEmbd % cfg.nHead !== 0) {
    throw new Error(`Invalid config: nEmbd (${cfg.nEmbd}) must be divisible by nHead (${cfg.nHead})`);
  }
  if (cfg.minLr > cfg.lr) throw new Error(`Invalid config: minLr (${cfg.minLr}) must not exceed lr (${cfg.lr})`);
  // Selective recomputation leaves the MoE sub-layer (and the routing the loss reads) as it is;
  // full recomputation would rerun the routing inside a segment whose tensors are gone by the loss.
  if (cfg.recompute === 'full' && (cfg.arch === 'gpt-moe' || cfg.arch === 'mamba-moe')) {
    throw new Error(
      `Invalid config: recompute full is not built for --arch ${cfg.arch} (its routing is read by the loss); use --recompute selective, or an architecture without experts`,
    );
  }
  if (cfg.topkAttention && !ATTENTION_ARCHS.includes(cfg.arch)) {
    throw new Error(
      `Invalid config: topkAttention selects attention scores and --arch ${cfg.arch} has no attention; use ${
        ATTENTION_ARCHS.join(', ')
      }`,
    );
  }
  if (cfg.arch === 'recurrent-depth' && cfg.nLayer - cfg.preludeLayers - cfg.codaLayers < 1) {
    throw new Error(
      `Invalid config: --arch recurrent-depth needs at least one core block: nLayer (${cfg.nLayer}) = preludeLayers (${cfg.preludeLayers}) + core blocks + codaLayers (${cfg.codaLayers}), so give --n-layer ${
        cfg.preludeLayers + cfg.codaLayers + 1
      } or more (or fewer --prelude-layers / --coda-layers)`,
    );
  }
  validateSchedule(scheduleFromConfig(cfg), cfg.steps);
  try {
    parseDataSpec(cfg.data);
  } catch (e) {
    throw new Error(`Invalid config: data: ${(e as Error).message}`);
  }
  return cfg;
}
