/**
 * A toy architecture written only here, in the test tree: a token embedding with learned
 * positions, `nLayer` blocks of a pre-LayerNorm GELU MLP (x + down(gelu(up(ln(x))))), a final
 * LayerNorm and the LM head tied to the embedding. Its split declaration says how tensor
 * parallelism cuts it (up column-parallel, down row-parallel, the embedding by vocabulary, the
 * rest whole); registering it (src/models/registry.ts registerArch) is all it takes for the rank
 * models and the derived accounting to handle it.
 */
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { add, gelu, layerNorm } from '../../src/autograd/ops.ts';
import type { Tape } from '../../src/autograd/tape.ts';
import { type ParamSpec, ParamStore, type Placement, placeSpecs } from '../../src/nn/params.ts';
import { type ForwardOptions, type ForwardResult, type Piece, PieceModel } from '../../src/models/model.ts';
import type { ModelContext, ModelInput } from '../../src/models/context.ts';
import { registerArch } from '../../src/models/registry.ts';
import { registeredArch, type SplitDeclaration } from '../../src/models/arch_hooks.ts';
import { vocabShape } from '../../src/models/vocab_pad.ts';
import { Random } from '../../src/util/random.ts';

/** The toy's shape. */
export interface ToyConfig {
  vocabSize: number;
  realVocab?: number;
  blockSize: number;
  nLayer: number;
  nEmbd: number;
}

/** The toy's split declaration (src/parallel/tensor/tp_table.ts names the roles). */
export const TOY_SPLIT: SplitDeclaration = [
  [/^toy\.wte$/, 'vocab'],
  [/^toy\.blocks\.\d+\.up\.(weight|bias)$/, 'column'],
  [/^toy\.blocks\.\d+\.down\.weight$/, 'row'],
  [/^toy\.(blocks\.\d+\.(down\.bias|ln\.(weight|bias))|wpe|ln_f\.(weight|bias))$/, 'replicated'],
];

/** Declarations in order: wte (V, C), wpe (T, C), per block ln, up (4C, C) + bias, down (C, 4C) + bias; ln_f. */
export function toySpecs(cfg: ToyConfig): ParamSpec[] {
  const { vocabSize: V, blockSize: T, nEmbd: C } = cfg, w = { kind: 'normal', std: 0.02 } as const;
  const one = { kind: 'const', value: 1 } as const, zero = { kind: 'const', value: 0 } as const;
  const specs: ParamSpec[] = [
    { name: 'toy.wte', shape: [V, C], init: w, decay: true },
    { name: 'toy.wpe', shape: [T, C], init: w, decay: true },
  ];
  const ln = (n: string) =>
    specs.push({ name: `${n}.weight`, shape: [C], init: one, decay: false }, {
      name: `${n}.bias`,
      shape: [C],
      init: zero,
      decay: false,
    });
  for (let i = 0; i < cfg.nLayer; i++) {
    const h = `toy.blocks.${i}`;
    ln(`${h}.ln`);
    specs.push({ name: `${h}.up.weight`, shape: [4 * C, C], init: w, decay: true });
    specs.push({ name: `${h}.up.bias`, shape: [4 * C], init: zero, decay: false });
    specs.push({ name: `${h}.down.weight`, shape: [C, 4 * C], init: w, decay: true });
    specs.push({ name: `${h}.down.bias`, shape: [C], init: zero, decay: false });
  }
  ln('toy.ln_f');
  return specs;
}

/** Blocks by index, wpe with the embedding, ln_f with the head, wte tied at both ends. */
export function toyPieceOf(name: string): Piece {
  const block = /^toy\.blocks\.(\d+)\./.exec(name);
  if (block) return Number(block[1]);
  return name === 'toy.wte' ? 'tied' : name.startsWith('toy.ln_f.') ? 'head' : 'embed';
}

/** The toy model (see the module doc). */
export class Toy extends PieceModel {
  readonly arch = 'toy';
  readonly params: ParamStore;
  readonly nLayer: number;

  constructor(readonly gpu: Gpu, readonly cfg: ToyConfig, seed: number, place?: Placement) {
    super();
    this.nLayer = cfg.nLayer;
    const rng = new Random(seed), random = () => rng.normal(), all = toySpecs(cfg);
    this.params = new ParamStore(gpu, place ? placeSpecs(all, random, place) : all, random);
  }

  private p(name: string): Tensor {
    return this.params.get(name).value;
  }

  embed(ctx: ModelContext, tape: Tape, input: ModelInput, b: number, t: number, opts: ForwardOptions): Promise<Tensor> {
    return this.embedTokens(
      ctx,
      tape,
      input,
      { wte: this.p('toy.wte'), positions: this.p('toy.wpe'), learned: true },
      b,
      t,
      opts,
    );
  }

  async block(ctx: ModelContext, tape: Tape, x: Tensor, i: number): Promise<Tensor> {
    const h = `toy.blocks.${i}`, p = (n: string) => this.p(`${h}.${n}`);
    const a = layerNorm(tape, x, p('ln.weight'), p('ln.bias'), `${h}.ln`); // (B·T, C)
    const up = gelu(tape, await ctx.linear(tape, a, `${h}.up`, p('up.weight'), p('up.bias'), `${h}.up`), `${h}.gelu`); // (B·T, 4C)
    return add(
      tape,
      x,
      await ctx.linear(tape, up, `${h}.down`, p('down.weight'), p('down.bias'), `${h}.down`),
      `${h}.res`,
    );
  }

  head(ctx: ModelContext, tape: Tape, x: Tensor, input: ModelInput, opts: ForwardOptions): Promise<ForwardResult> {
    const xf = layerNorm(tape, x, this.p('toy.ln_f.weight'), this.p('toy.ln_f.bias'), 'toy.ln_f');
    return Promise.resolve(
      ctx.head(tape, xf, this.p('toy.wte'), input, opts, this.cfg.realVocab ?? this.cfg.vocabSize),
    );
  }

  pieceOf(name: string): Piece {
    return toyPieceOf(name);
  }

  numParams(): number {
    return this.params.count - this.cfg.blockSize * this.cfg.nEmbd;
  }

  flopsPerToken(): number {
    return 6 * this.numParams();
  }

  describe(): string {
    return `toy · ${this.cfg.nLayer} MLP blocks · width ${this.cfg.nEmbd}`;
  }
}

/** Registers `toy` once per process (every test file that needs it calls this). */
export function registerToy(): void {
  if (registeredArch('toy')) return;
  registerArch('toy', {
    create: (gpu, cfg, vocabSize, seed, place) =>
      new Toy(
        gpu,
        { ...vocabShape(cfg, vocabSize), blockSize: cfg.blockSize, nLayer: cfg.nLayer, nEmbd: cfg.nEmbd },
        seed,
        place,
      ),
    pieceOf: toyPieceOf,
    split: TOY_SPLIT,
  });
}
