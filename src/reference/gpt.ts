/**
 * The whole GPT forward and backward in f64, composed from the kernel references. Tests
 * compare the GPU model's loss and every parameter gradient against it, which checks the
 * autograd wiring (tape order, accumulation on the residual stream, tied embeddings).
 */
import type { GPTConfig } from '../models/gpt.ts';
import { matmulRef } from './matmul.ts';
import { addBiasRef, geluBackwardRef, geluRef } from './elementwise.ts';
import { layerNormBackwardRef, layerNormRef } from './layernorm.ts';
import { attentionBackwardRef, attentionForwardRef } from './attention.ts';
import { embeddingBackwardRef, embeddingRef } from './embedding.ts';
import { crossEntropyBackwardRef, crossEntropyRef } from './cross_entropy.ts';

type Params = Map<string, Float64Array>;

function addInto(dst: Float64Array, src: Float64Array): void {
  for (let i = 0; i < dst.length; i++) dst[i] += src[i];
}

/** Loss and gradients (same names as the parameters) of the mean cross-entropy. */
export function gptLossAndGradsRef(
  cfg: GPTConfig,
  params: Params,
  tokens: Int32Array,
  targets: Int32Array,
  b: number,
  t: number,
): { loss: number; grads: Params } {
  const { nLayer: L, nHead: nh, nEmbd: C, vocabSize: V, blockSize } = cfg;
  const n = b * t;
  const P = (k: string) => {
    const v = params.get(k);
    if (!v) throw new Error(`gptLossAndGradsRef: missing parameter ${k}`);
    return v;
  };
  const grads: Params = new Map([...params].map(([k, v]) => [k, new Float64Array(v.length)]));
  const G = (k: string) => grads.get(k)!;
  const linear = (x: Float64Array, name: string, cin: number, cout: number) => {
    const y = matmulRef(x, P(`${name}.weight`), n, cout, cin, { transB: true });
    return cfg.bias ? addBiasRef(y, P(`${name}.bias`)) : y;
  };
  const linearBack = (x: Float64Array, dy: Float64Array, name: string, cin: number, cout: number) => {
    addInto(G(`${name}.weight`), matmulRef(dy, x, cout, cin, n, { transA: true }));
    if (cfg.bias) {
      const db = G(`${name}.bias`);
      for (let r = 0; r < n; r++) for (let j = 0; j < cout; j++) db[j] += dy[r * cout + j];
    }
    return matmulRef(dy, P(`${name}.weight`), n, cin, cout);
  };

  // ---- forward, keeping what backward needs
  const saved: Record<string, Float64Array>[] = [];
  let x = embeddingRef(tokens, P('transformer.wte.weight'), P('transformer.wpe.weight'), b, t, C);
  for (let i = 0; i < L; i++) {
    const h = `transformer.h.${i}`;
    const s: Record<string, Float64Array> = { x0: x };
    s.a = layerNormRef(x, P(`${h}.ln_1.weight`), P(`${h}.ln_1.bias`), n, C).y;
    s.qkv = linear(s.a, `${h}.attn.c_attn`, C, 3 * C);
    const att = attentionForwardRef(s.qkv, { b, t, c: C, nh });
    s.att = att.att;
    s.y = att.y;
    const proj = linear(s.y, `${h}.attn.c_proj`, C, C);
    s.x1 = x.map((v, j) => v + proj[j]);
    s.m = layerNormRef(s.x1, P(`${h}.ln_2.weight`), P(`${h}.ln_2.bias`), n, C).y;
    s.fc = linear(s.m, `${h}.mlp.c_fc`, C, 4 * C);
    s.g = geluRef(s.fc);
    const down = linear(s.g, `${h}.mlp.c_proj`, 4 * C, C);
    x = s.x1.map((v, j) => v + down[j]);
    saved.push(s);
  }
  const xf = layerNormRef(x, P('transformer.ln_f.weight'), P('transformer.ln_f.bias'), n, C).y;
  const logits = matmulRef(xf, P('transformer.wte.weight'), n, V, C, { transB: true });
  const { loss } = crossEntropyRef(logits, targets, n, V);

  // ---- backward
  const dlogits = crossEntropyBackwardRef(logits, targets, n, V);
  addInto(G('transformer.wte.weight'), matmulRef(dlogits, xf, V, C, n, { transA: true }));
  const dxf = matmulRef(dlogits, P('transformer.wte.weight'), n, C, V);
  const lnf = layerNormBackwardRef(x, P('transformer.ln_f.weight'), dxf, n, C);
  addInto(G('transformer.ln_f.weight'), lnf.dw);
  addInto(G('transformer.ln_f.bias'), lnf.db);
  let dx = lnf.dx;
  for (let i = L - 1; i >= 0; i--) {
    const h = `transformer.h.${i}`;
    const s = saved[i];
    const dg = linearBack(s.g, dx, `${h}.mlp.c_proj`, 4 * C, C);
    const dfc = geluBackwardRef(s.fc, dg);
    const dm = linearBack(s.m, dfc, `${h}.mlp.c_fc`, C, 4 * C);
    const ln2 = layerNormBackwardRef(s.x1, P(`${h}.ln_2.weight`), dm, n, C);
    addInto(G(`${h}.ln_2.weight`), ln2.dw);
    addInto(G(`${h}.ln_2.bias`), ln2.db);
    const dx1 = dx.map((v, j) => v + ln2.dx[j]); // residual: both paths
    const dy = linearBack(s.y, dx1, `${h}.attn.c_proj`, C, C);
    const dqkv = attentionBackwardRef(s.qkv, s.att, dy, { b, t, c: C, nh });
    const da = linearBack(s.a, dqkv, `${h}.attn.c_attn`, C, 3 * C);
    const ln1 = layerNormBackwardRef(s.x0, P(`${h}.ln_1.weight`), da, n, C);
    addInto(G(`${h}.ln_1.weight`), ln1.dw);
    addInto(G(`${h}.ln_1.bias`), ln1.db);
    dx = dx1.map((v, j) => v + ln1.dx[j]);
  }
  const emb = embeddingBackwardRef(tokens, dx, V, blockSize, b, t, C);
  addInto(G('transformer.wte.weight'), emb.dwte);
  addInto(G('transformer.wpe.weight'), emb.dwpe);
  return { loss, grads };
}
