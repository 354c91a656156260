/**
 * The recurrent-depth model's forward and backward in f64 (docs/design.md#recurrent-depth), composed from
 * the kernel references with the parameter names of src/models/recurrent_depth.ts. Truncated
 * backprop is written out: iterations before the last k contribute no gradient at all, so tests
 * hold the GPU model's truncation to it.
 */
import type { RecurrentDepthConfig } from '../models/recurrent_depth.ts';
import { matmulRef } from './matmul.ts';
import { addBiasRef, geluBackwardRef, geluRef } from './elementwise.ts';
import { layerNormBackwardRef, layerNormRef } from './layernorm.ts';
import { attentionBackwardRef, attentionForwardRef } from './attention.ts';
import { embeddingBackwardRef, embeddingRef } from './embedding.ts';
import { crossEntropyBackwardRef, crossEntropyRef } from './cross_entropy.ts';

type Params = Map<string, Float64Array>;
type Saved = Record<string, Float64Array>;

function addInto(dst: Float64Array, src: Float64Array): void {
  for (let i = 0; i < dst.length; i++) dst[i] += src[i];
}

const sum = (a: Float64Array, b: Float64Array) => a.map((v, i) => v + b[i]);

/**
 * Loss and gradients (by parameter name) of the mean cross-entropy at r core iterations, the
 * gradients flowing through the last `cfg.recurBackprop` iterations only.
 * @throws Error naming a missing parameter.
 */
export function recurrentDepthLossAndGradsRef(
  cfg: RecurrentDepthConfig,
  params: Params,
  tokens: Int32Array,
  targets: Int32Array,
  b: number,
  t: number,
  r: number,
): { loss: number; grads: Params } {
  const { nHead: nh, nEmbd: C, vocabSize: V, blockSize, preludeLayers: P, codaLayers: Q } = cfg;
  const R = cfg.nLayer - P - Q, n = b * t, inject = cfg.recurInject, first = Math.max(0, r - cfg.recurBackprop);
  const W = (k: string) => {
    const v = params.get(k);
    if (!v) throw new Error(`recurrentDepthLossAndGradsRef: missing parameter ${k}`);
    return v;
  };
  const grads: Params = new Map([...params].map(([k, v]) => [k, new Float64Array(v.length)]));
  const G = (k: string) => grads.get(k)!;
  const linear = (x: Float64Array, name: string, cin: number, cout: number, bias = cfg.bias) => {
    const y = matmulRef(x, W(`${name}.weight`), n, cout, cin, { transB: true });
    return bias ? addBiasRef(y, W(`${name}.bias`)) : y;
  };
  const linearBack = (x: Float64Array, dy: Float64Array, name: string, cin: number, cout: number, bias = cfg.bias) => {
    addInto(G(`${name}.weight`), matmulRef(dy, x, cout, cin, n, { transA: true }));
    if (bias) {
      const db = G(`${name}.bias`);
      for (let row = 0; row < n; row++) for (let j = 0; j < cout; j++) db[j] += dy[row * cout + j];
    }
    return matmulRef(dy, W(`${name}.weight`), n, cin, cout);
  };
  const blockF = (h: string, x: Float64Array): { y: Float64Array; s: Saved } => {
    const s: Saved = { x0: x };
    s.a = layerNormRef(x, W(`${h}.ln_1.weight`), W(`${h}.ln_1.bias`), n, C).y;
    s.qkv = linear(s.a, `${h}.attn.c_attn`, C, 3 * C);
    const att = attentionForwardRef(s.qkv, { b, t, c: C, nh });
    [s.att, s.y] = [att.att, att.y];
    s.x1 = sum(x, linear(s.y, `${h}.attn.c_proj`, C, C));
    s.m = layerNormRef(s.x1, W(`${h}.ln_2.weight`), W(`${h}.ln_2.bias`), n, C).y;
    s.fc = linear(s.m, `${h}.mlp.c_fc`, C, 4 * C);
    s.g = geluRef(s.fc);
    return { y: sum(s.x1, linear(s.g, `${h}.mlp.c_proj`, 4 * C, C)), s };
  };
  const blockB = (h: string, s: Saved, dx: Float64Array): Float64Array => {
    const dfc = geluBackwardRef(s.fc, linearBack(s.g, dx, `${h}.mlp.c_proj`, 4 * C, C));
    const ln2 = layerNormBackwardRef(
      s.x1,
      W(`${h}.ln_2.weight`),
      linearBack(s.m, dfc, `${h}.mlp.c_fc`, C, 4 * C),
      n,
      C,
    );
    addInto(G(`${h}.ln_2.weight`), ln2.dw);
    addInto(G(`${h}.ln_2.bias`), ln2.db);
    const dx1 = sum(dx, ln2.dx);
    const dqkv = attentionBackwardRef(s.qkv, s.att, linearBack(s.y, dx1, `${h}.attn.c_proj`, C, C), { b, t, c: C, nh });
    const ln1 = layerNormBackwardRef(
      s.x0,
      W(`${h}.ln_1.weight`),
      linearBack(s.a, dqkv, `${h}.attn.c_attn`, C, 3 * C),
      n,
      C,
    );
    addInto(G(`${h}.ln_1.weight`), ln1.dw);
    addInto(G(`${h}.ln_1.bias`), ln1.db);
    return sum(dx1, ln1.dx);
  };
  const core = `transformer.h.${P}`, adapter = (half: string) => `${core}.adapter.${half}`;
  const pieces = (lo: number, hi: number) => Array.from({ length: hi - lo }, (_, i) => `transformer.h.${lo + i}`);

  // ---- forward
  let x = embeddingRef(tokens, W('transformer.wte.weight'), W('transformer.wpe.weight'), b, t, C);
  const prelude: Saved[] = [], iters: { sIn: Float64Array; blocks: Saved[] }[] = [], coda: Saved[] = [];
  for (const h of pieces(0, P)) ({ y: x, s: prelude[prelude.length] } = blockF(h, x));
  const e = x, ue = inject ? linear(e, adapter('embed'), C, C, false) : null;
  let s = inject ? new Float64Array(n * C) : e;
  for (let j = 0; j < r; j++) {
    let u = !inject ? s : j === 0 ? ue! : sum(linear(s, adapter('state'), C, C, false), ue!);
    const blocks: Saved[] = [];
    for (let c = 0; c < R; c++) ({ y: u, s: blocks[c] } = blockF(`${core}.core.${c}`, u));
    iters.push({ sIn: s, blocks });
    s = u;
  }
  x = s;
  for (const h of pieces(P + 1, P + 1 + Q)) ({ y: x, s: coda[coda.length] } = blockF(h, x));
  const lnf = layerNormRef(x, W('transformer.ln_f.weight'), W('transformer.ln_f.bias'), n, C).y;
  const logits = matmulRef(lnf, W('transformer.wte.weight'), n, V, C, { transB: true });
  const { loss } = crossEntropyRef(logits, targets, n, V);

  // ---- backward
  const dlogits = crossEntropyBackwardRef(logits, targets, n, V);
  addInto(G('transformer.wte.weight'), matmulRef(dlogits, lnf, V, C, n, { transA: true }));
  const lnfB = layerNormBackwardRef(
    x,
    W('transformer.ln_f.weight'),
    matmulRef(dlogits, W('transformer.wte.weight'), n, C, V),
    n,
    C,
  );
  addInto(G('transformer.ln_f.weight'), lnfB.dw);
  addInto(G('transformer.ln_f.bias'), lnfB.db);
  let dx = lnfB.dx;
  for (let i = Q - 1; i >= 0; i--) dx = blockB(`transformer.h.${P + 1 + i}`, coda[i], dx);
  const de = new Float64Array(n * C);
  // Truncation: iterations j < first ran without recording, so the chain stops at their output.
  for (let j = r - 1; j >= first; j--) {
    for (let c = R - 1; c >= 0; c--) dx = blockB(`${core}.core.${c}`, iters[j].blocks[c], dx);
    if (!inject) continue; // s_j = core(s_{j−1}): dx already is the gradient of s_{j−1}
    addInto(de, linearBack(e, dx, adapter('embed'), C, C, false));
    dx = j === 0 ? new Float64Array(n * C) : linearBack(iters[j].sIn, dx, adapter('state'), C, C, false);
  }
  if (!inject && first === 0) addInto(de, dx); // s₀ = e, reached only when no iteration was cut
  dx = de;
  for (let i = P - 1; i >= 0; i--) dx = blockB(`transformer.h.${i}`, prelude[i], dx);
  const emb = embeddingBackwardRef(tokens, dx, V, blockSize, b, t, C);
  addInto(G('transformer.wte.weight'), emb.dwte);
  addInto(G('transformer.wpe.weight'), emb.dwpe);
  return { loss, grads };
}
