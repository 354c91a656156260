/**
 * The vector-Jacobian product of every op, side by side in one table (llm.c keeps each
 * layer's forward and backward together; here the forward is in ops.ts with the same names).
 * `RuleTable` is a mapped type over `OpRecords`, so an op without a rule does not compile.
 */
import { matmul } from '../kernels/matmul.ts';
import { axpy, geluBackward } from '../kernels/elementwise.ts';
import { layerNormBackward } from '../kernels/layernorm.ts';
import { attentionBackward } from '../kernels/attention.ts';
import { flashAttentionBackward } from '../kernels/flash_attention.ts';
import { embeddingBackward } from '../kernels/embedding.ts';
import { crossEntropyBackward } from '../kernels/cross_entropy.ts';
import { columnSum } from '../kernels/reduce.ts';
import { rmsNormBackward } from '../kernels/rmsnorm.ts';
import {
  lerpBackward,
  logSigmoidBackward,
  mulBackward,
  reluSquaredBackward,
  scaleChannelsBackward,
  sigmoidBackward,
  siluBackward,
  tokenShiftBackward,
} from '../kernels/activations.ts';
import type { RuleTable } from './records.ts';
import { rowView } from './ops.ts';
import { MIXER_RULES } from './mixer_rules.ts';
import { collectiveRule } from './collective.ts';
import { MOE_RULES } from './moe_ops.ts';
import { halfCopy } from './autocast.ts';

export const RULES: RuleTable = {
  ...MIXER_RULES,
  ...MOE_RULES,
  collective: collectiveRule,
  checkpoint: (g, r) => r.recompute(g.grad(r.y), r.xs.map((x) => g.acc(x))),
  linear(g, { x, w, b, y, n, cin, cout, half }) {
    const dy = g.grad(y);
    if (!dy) return;
    // Under autocast both matmuls read half precision operands and accumulate in f32 (autocast.ts).
    const dyh = half && halfCopy(g.gpu, half.mode, dy);
    const [dyM, xM, wM] = half ? [dyh!, half.x, half.w] : [dy, x, w];
    const dx = g.acc(x);
    if (dx) matmul(g.gpu, dyM, wM, dx, n, cin, cout, { beta: 1 }); // dx (N,Cin) += dy (N,Cout) · w (Cout,Cin)
    const dw = g.acc(w);
    if (dw) matmul(g.gpu, dyM, xM, dw, cout, cin, n, { transA: true, beta: 1 }); // dw (Cout,Cin) += dyᵀ · x
    dyh?.release();
    const db = b && g.acc(b);
    if (db) columnSum(g.gpu, dy, db, n, cout); // db (Cout) += Σ_rows dy (f32, as torch's autocast sums it)
  },
  rowSlice(g, { x, y, r0, n, c }) {
    const dy = g.grad(y);
    const dx = g.acc(x);
    // y shares x's memory, but its gradient is a buffer of its own; add it into dx's rows.
    if (dy && dx) axpy(g.gpu, 1, dy, rowView(dx, r0, n, c, 'rowSlice backward'));
  },
  add(g, { a, b, y }) {
    const dy = g.grad(y);
    if (!dy) return;
    const da = g.acc(a);
    if (da) axpy(g.gpu, 1, dy, da);
    const db = g.acc(b);
    if (db) axpy(g.gpu, 1, dy, db);
  },
  gelu(g, { x, y }) {
    const dy = g.grad(y);
    const dx = g.acc(x);
    if (dy && dx) geluBackward(g.gpu, x, dy, dx);
  },
  layerNorm(g, { x, w, b, y, mean, rstd }) {
    const dy = g.grad(y);
    if (!dy) return;
    const dx = g.acc(x), dw = g.acc(w), db = g.acc(b);
    if (!dx || !dw || !db) throw new Error('layerNorm backward expects gradients for x, w and b');
    layerNormBackward(g.gpu, x, w, mean, rstd, dy, dx, dw, db);
  },
  attention(g, { qkv, y, att, dims }) {
    const dy = g.grad(y);
    const dqkv = g.acc(qkv);
    if (dy && dqkv) attentionBackward(g.gpu, qkv, att, dy, dqkv, dims);
  },
  flashAttention(g, { qkv, y, lse, dims, half }) {
    const dy = g.grad(y);
    const dqkv = g.acc(qkv);
    if (dy && dqkv) flashAttentionBackward(g.gpu, half ?? qkv, y, lse, dy, dqkv, dims);
  },
  embedding(g, { index, wte, wpe, y, b, t }) {
    const dy = g.grad(y);
    const dwte = g.acc(wte);
    if (!dy || !dwte) return;
    // Recurrent models pass a frozen zero table for wpe; its gradient goes to a scratch buffer.
    const dwpe = g.acc(wpe) ?? g.gpu.zeros(wpe.shape, 'f32', 'scratch.dwpe');
    embeddingBackward(g.gpu, index, dy, dwte, dwpe, b, t);
    if (!g.acc(wpe)) dwpe.release();
  },
  crossEntropy(g, { logits, targets, lse, loss, gradScale, cols }) {
    const dlogits = g.acc(logits);
    if (dlogits) crossEntropyBackward(g.gpu, logits, targets, lse, loss, dlogits, gradScale, cols);
  },
  rmsNorm(g, { x, w, y, rstd }) {
    const dy = g.grad(y);
    if (!dy) return;
    const dx = g.acc(x), dw = g.acc(w);
    // x may arrive as (B, T, C); the kernel reads its last dimension against w.
    const c = w.size;
    const [x2, dx2] = [x.view([x.size / c, c]), dx && dx.view([x.size / c, c])];
    if (dx2 || dw) rmsNormBackward(g.gpu, x2, w, rstd, dy, dx2, dw);
  },
  silu(g, { x, y }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) siluBackward(g.gpu, x, dy, dx);
  },
  sigmoid(g, { x, y }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) sigmoidBackward(g.gpu, x, dy, dx);
  },
  reluSquared(g, { x, y }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) reluSquaredBackward(g.gpu, x, dy, dx);
  },
  logSigmoid(g, { x, y, scale }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) logSigmoidBackward(g.gpu, x, dy, dx, scale);
  },
  mul(g, { a, b, y }) {
    const dy = g.grad(y);
    if (dy) mulBackward(g.gpu, a, b, dy, g.acc(a), g.acc(b));
  },
  tokenShift(g, { x, y, b, t }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) tokenShiftBackward(g.gpu, dy, dx, b, t);
  },
  lerp(g, { a, b, mu, y }) {
    const dy = g.grad(y);
    if (dy) lerpBackward(g.gpu, a, b, mu, dy, g.acc(a), g.acc(b), g.acc(mu));
  },
  scaleChannels(g, { x, s, y }) {
    const dy = g.grad(y);
    if (dy) scaleChannelsBackward(g.gpu, x, s, dy, g.acc(x), g.acc(s));
  },
};
