/**
 * Vector-Jacobian products of the mixers in mixer_ops.ts, merged into RULES (rules.ts). The
 * backward kernels accumulate, so each rule only asks the tape where to add.
 */
import { linearAttentionBackward } from '../kernels/linear_attention.ts';
import { recurrentLinearAttentionBackward } from '../kernels/linear_attention_recurrent.ts';
import { selectiveScanBackward } from '../kernels/selective_scan_bwd.ts';
import { conv1dBackward } from '../kernels/conv1d.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { GradContext, RuleTable } from './records.ts';

type MixerOp = 'linearAttention' | 'recurrentLinearAttention' | 'selectiveScan' | 'conv1d';

/**
 * Where a fused backward kernel writes each input's gradient. The kernels write every input's
 * gradient in one pass, so each needs a buffer even when nothing upstream wants it (a scratch
 * one), and no two may share a GPUBuffer: WebGPU refuses a writable binding aliased with
 * another binding, and parameter gradients are slices of one flat buffer (nn/params.ts). A
 * second gradient on an already-used buffer goes to scratch and is added in by `finish`.
 */
class Sinks {
  private readonly used = new Set<GPUBuffer>();
  private readonly scratch: Tensor[] = [];
  private readonly addBack: [Tensor, Tensor][] = [];

  constructor(private readonly g: GradContext) {}

  /** The buffer to accumulate t's gradient into for this kernel call. */
  of(t: Tensor): Tensor {
    const acc = this.g.acc(t);
    if (acc && !this.used.has(acc.buffer)) {
      this.used.add(acc.buffer);
      return acc;
    }
    const s = this.g.gpu.zeros(t.shape, 'f32', `scratch.${t.label}`);
    this.scratch.push(s);
    if (acc) this.addBack.push([s, acc]);
    return s;
  }

  /** Adds the redirected gradients into their real buffers and releases the scratch. */
  finish(): void {
    for (const [s, acc] of this.addBack) axpy(this.g.gpu, 1, s, acc);
    for (const s of this.scratch) s.release();
  }
}

export const MIXER_RULES: Pick<RuleTable, MixerOp> = {
  linearAttention(g, { q, k, v, g: decay, states, o, dims }) {
    const dout = g.grad(o);
    if (!dout) return;
    const s = new Sinks(g);
    linearAttentionBackward(g.gpu, q, k, v, decay, states, dout, s.of(q), s.of(k), s.of(v), s.of(decay), dims);
    s.finish();
  },
  recurrentLinearAttention(g, { q, k, v, w, u, o, dims }) {
    const dout = g.grad(o);
    if (!dout) return;
    const s = new Sinks(g);
    const du = u ? s.of(u) : null;
    recurrentLinearAttentionBackward(g.gpu, q, k, v, w, u, dout, s.of(q), s.of(k), s.of(v), s.of(w), du, dims);
    s.finish();
  },
  selectiveScan(g, { u, delta, A, Bm, Cm, D, bias, z, states, out, dims }) {
    const dout = g.grad(out);
    if (!dout) return;
    const s = new Sinks(g);
    selectiveScanBackward(g.gpu, u, delta, A, Bm, Cm, D, bias, z, states, dout, {
      du: s.of(u),
      ddelta: s.of(delta),
      dA: s.of(A),
      dB: s.of(Bm),
      dC: s.of(Cm),
      dD: s.of(D),
      dbias: s.of(bias),
      dz: z ? s.of(z) : null,
    }, dims);
    s.finish();
  },
  conv1d(g, { x, w, bias, y, dims }) {
    const dy = g.grad(y);
    if (!dy) return;
    const s = new Sinks(g);
    conv1dBackward(g.gpu, x, w, dy, s.of(x), s.of(w), s.of(bias), dims);
    s.finish();
  },
};
