/**
 * The outer loop of low-communication data parallelism (low_comm.ts;
 * docs/design.md#low-communication-data-parallelism), run by the mesh trainer after each inner step when the plan has
 * `--sync` other than ddp. Each dp worker (a replica of tp × pp ranks) trains alone; at the steps low_comm.ts `syncsAt`
 * names, a fragment's pseudo-gradient Δ = θ_global − θ_local is averaged over the worker's dp group and an outer
 * Nesterov SGD moves θ_global (torch.optim.SGD(nesterov=True) arithmetic):
 *   m ← μ·m + Δ̄;  θ_global ← θ_global − lr·(Δ̄ + μ·m)   (μ = 0: θ_global − lr·Δ̄).
 * Without overlap the worker continues from θ_global; with τ > 0 the allReduce runs while τ more
 * inner steps do, and the landed fragment is mixed: θ ← α·θ_local + (1−α)·θ_global.
 * CO2 (co2Round) launches each round's allReduce and lands the previous round's, so the whole
 * inner phase hides it; the worker restarts from θ_global minus (1 − penalty) of its own update
 * of the round just ended, which the next landing accounts for, and the outer momentum is
 * clipped to `outerClip` (its norm over this rank's shard).
 * The last step of a run lands everything in flight and synchronises every fragment without
 * overlap, so a run ends with one model on every worker.
 *
 * The outer state lives in GPU tensors (a checkpoint's `outer.*`): θ_global, the momentum, the
 * results of allReduces in flight (written by {@link OuterSync.settle} before a save) and, per
 * fragment, the step its result is due, so a resumed run lands the same values at the same steps.
 * The arithmetic runs on the host in f32 storage: it touches each parameter once per H steps.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Communicator } from '../../comm/communicator.ts';
import { packParams, type Param, type ParamStore, unpackParams } from '../../nn/params.ts';
import { type GradReduce, gradReduce } from './grad_compression.ts';
import { subGroup } from './data_parallel.ts';
import type { Sent } from '../mesh/traffic.ts';
import { fragmentOf, outerScheme, syncsAt, type SyncSpec } from './low_comm.ts';

interface InFlight {
  /** The 0-based step at whose end the result is applied. */
  due: number;
  /** The allReduce, while it runs in this process; absent once settled or after a resume (then `outer.pending` holds it). */
  result?: Promise<Float32Array>;
  /** Its end on the group's background clock (µs), once it finished; the rank's clock waits for it on landing. */
  simEnd?: number;
}

/** The outer optimizer of one rank (see the module doc). */
export class OuterSync {
  private readonly frags: Param[][];
  private readonly reduce: GradReduce[];
  private readonly t: Record<'global' | 'momentum' | 'pending' | 'start' | 'due', Tensor>;
  private readonly inFlight = new Map<number, InFlight>();
  private loaded = false;
  private readonly outer: Communicator;

  /**
   * @param dp this rank's dp group (the workers holding the same shard); `steps` the run's length.
   * @throws Error from the compressor of `spec.outerQuant` (e.g. a missing GPU feature).
   */
  constructor(
    private readonly gpu: Gpu,
    private readonly params: ParamStore,
    dp: Communicator,
    readonly spec: SyncSpec,
    private readonly steps: number,
  ) {
    const F = spec.fragments, outer = this.outer = subGroup(dp, 'outer');
    this.frags = [...Array(F).keys()].map((f) => params.params.filter((p) => fragmentOf(p.name, F) === f));
    const scheme = outerScheme(spec.outerQuant);
    this.reduce = this.frags.map((ps, f) => gradReduce(gpu, outer, ps, scheme, 'avg', `outer${f}`));
    const n = params.flatSize, z = (what: string, k = n) => gpu.zeros([k], 'f32', `outer.${what}`);
    this.t = {
      global: z('global'),
      momentum: z('momentum'),
      pending: z('pending'),
      start: z('start'),
      due: z('due', F),
    };
    // θ_global starts where every worker starts (the same seed): the initial weights.
    gpu.copy(params.values, this.t.global);
    gpu.copy(params.values, this.t.start);
  }

  /**
   * The outer work at the end of 0-based inner step `s`: lands the fragments due, starts the
   * ones `syncsAt` names, and on the run's last step brings every worker to θ_global.
   * Resolves to whether anything was sent or applied.
   * @throws (rejects with) a peer's failure or timeout.
   */
  async afterStep(s: number): Promise<boolean> {
    await this.resume();
    const last = s + 1 === this.steps;
    if (this.spec.method === 'co2') return await this.co2Round(s, last);
    const starts = last ? this.frags.map((_, f) => f) : syncsAt(this.spec, s);
    if (!starts.length && ![...this.inFlight.values()].some((x) => last || x.due === s)) return false;
    const theta = await this.read(this.params.values);
    const global = await this.read(this.t.global), momentum = await this.read(this.t.momentum);
    for (const [f, x] of [...this.inFlight]) {
      if (last || x.due === s) await this.land(f, theta, global, momentum, last ? 0 : this.spec.mixing);
    }
    for (const f of starts) {
      this.launch(f, s + this.spec.overlapSteps, theta, global);
      if (last || this.spec.overlapSteps === 0) await this.land(f, theta, global, momentum, 0);
    }
    await this.write(theta, global, momentum);
    return true;
  }

  /** Waits for the allReduces in flight and keeps their results in `outer.pending`, so a checkpoint holds them. */
  async settle(): Promise<void> {
    const pending = await this.read(this.t.pending);
    for (const [f, x] of this.inFlight) {
      if (!x.result) continue;
      unpackParams(await x.result, pending, this.frags[f]);
      delete x.result;
    }
    this.gpu.write(this.t.pending, pending);
  }

  /** The entries of `sent` on the outer group: an allReduce in flight also sends between steps (traffic.ts keys). */
  ownTraffic(sent: Sent): Sent {
    return Object.fromEntries(Object.entries(sent).filter(([k]) => k.startsWith(`${this.outer.id}/`)));
  }

  /** The tensors a checkpoint holds, keyed `outer.<what>` (plus the outer compressors' own state). */
  state(): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const [k, t] of Object.entries(this.t)) out[`outer.${k}`] = t;
    this.reduce.forEach((r, f) => {
      for (const [k, t] of Object.entries(r.state())) out[`outer.compress${f}.${k}`] = t;
    });
    return out;
  }

  /** Frees the outer state. */
  dispose(): void {
    for (const t of Object.values(this.t)) t.release();
  }

  /**
   * CO2 at the end of step `s`: every H steps, launch this round's allReduce of the worker's own
   * update Δ_k = θ_start − θ, land round k−1's into θ_global, restart from
   * θ_global − (1 − penalty)·Δ_k. The last step lands both, without overlap.
   */
  private async co2Round(s: number, last: boolean): Promise<boolean> {
    const H = this.spec.innerSteps;
    if ((s + 1) % H !== 0 && !last) return false;
    const theta = await this.read(this.params.values), start = await this.read(this.t.start);
    const global = await this.read(this.t.global), momentum = await this.read(this.t.momentum);
    if (this.inFlight.has(0)) await this.land(0, theta, global, momentum, null);
    this.launch(0, s + H, theta, start);
    if (last) await this.land(0, theta, global, momentum, null);
    // Start of the next round: θ_global minus what the worker keeps of its own unsynchronised update.
    const keep = last ? 0 : 1 - this.spec.stalenessPenalty;
    for (const p of this.params.params) {
      for (let i = p.offset; i < p.offset + p.size; i++) theta[i] = global[i] - keep * (start[i] - theta[i]);
    }
    this.gpu.write(this.t.start, theta);
    await this.write(theta, global, momentum);
    return true;
  }

  /** Starts fragment f's allReduce of Δ = from − θ (from: θ_global, or CO2's round start), due at the end of step `due`. */
  private launch(f: number, due: number, theta: Float32Array, from: Float32Array): void {
    const ps = this.frags[f], n = ps.reduce((a, p) => a + p.size, 0), delta = new Float32Array(n);
    let o = 0;
    for (const p of ps) for (let i = p.offset; i < p.offset + p.size; i++) delta[o++] = from[i] - theta[i];
    // A fragment with no parameters on this stage moves nothing (every worker of the group agrees).
    // Its messages run on the group's own simulated clock from now: the inner steps it overlaps
    // move the rank's clock, which waits for this one only when the fragment lands.
    const { transport } = this.outer, bg = transport.backgroundClock(this.outer.id);
    bg.receive(transport.clock.now);
    const x: InFlight = { due };
    x.result = (n ? this.reduce[f].reduce(delta) : Promise.resolve(delta)).then((v) => (x.simEnd = bg.now, v));
    x.result.catch(() => {}); // a failure surfaces where the result is awaited
    this.inFlight.set(f, x);
    this.gpu.write(this.t.due, this.dueVector());
  }

  /**
   * Lands fragment f: the outer Nesterov step on θ_global with the averaged Δ̄, then θ ← α·θ +
   * (1 − α)·θ_global over the fragment (`mix` null: CO2, which sets θ itself).
   */
  private async land(f: number, theta: Float32Array, global: Float32Array, m: Float32Array, mix: number | null) {
    const x = this.inFlight.get(f)!;
    const avg = x.result ? await x.result : packParams(await this.read(this.t.pending), this.frags[f]);
    if (x.simEnd !== undefined) this.outer.transport.clock.receive(x.simEnd);
    this.inFlight.delete(f);
    this.gpu.write(this.t.due, this.dueVector());
    const { outerLr: lr, outerMomentum: mu, outerClip } = this.spec, ps = this.frags[f];
    let o = 0, sq = 0;
    for (const p of ps) {
      for (let i = p.offset; i < p.offset + p.size; i++) sq += (m[i] = Math.fround(mu * m[i] + avg[o++])) ** 2;
    }
    const clip = outerClip > 0 && Math.sqrt(sq) > outerClip ? outerClip / Math.sqrt(sq) : 1;
    o = 0;
    for (const p of ps) {
      for (let i = p.offset; i < p.offset + p.size; i++) {
        m[i] *= clip;
        global[i] -= lr * (mu > 0 ? avg[o] + mu * m[i] : avg[o]);
        o++;
        if (mix !== null) theta[i] = mix * theta[i] + (1 - mix) * global[i];
      }
    }
  }

  /** After a resume: the fragments in flight at the saved step, whose results `outer.pending` holds. */
  private async resume(): Promise<void> {
    if (this.loaded) return;
    this.loaded = true;
    const due = await this.read(this.t.due);
    due.forEach((d, f) => d > 0 && this.inFlight.set(f, { due: d - 1 }));
  }

  /** Per fragment, 1 + the step its result is due, or 0 (`outer.due`). */
  private dueVector(): Float32Array {
    return Float32Array.from(this.frags, (_, f) => (this.inFlight.get(f)?.due ?? -1) + 1);
  }

  private async write(theta: Float32Array, global: Float32Array, momentum: Float32Array): Promise<void> {
    this.gpu.write(this.params.values, theta);
    this.gpu.write(this.t.global, global);
    this.gpu.write(this.t.momentum, momentum);
    await this.gpu.sync();
  }

  private async read(t: Tensor): Promise<Float32Array> {
    return (await this.gpu.read(t) as Float32Array).slice();
  }
}
