/**
 * Mamba selective scan backward (shaders/selective_scan_bwd.wgsl): the gradients of the forward
 * in selective_scan.ts, recomputing h inside each chunk from the saved chunk-entry states. It is
 * a module of its own because its scratch layout, passes and loop splits matter only to it; the
 * shapes, checks and dispatch plumbing it shares with the forward stay in selective_scan.ts.
 *
 * Parallel over (b, d) for the scan itself and over (b, chunk, n) for dB/dC, which sum over
 * channels: each dB/dC element is owned by one invocation that loops over d, so there are no
 * atomics and no per-channel partial of size (B, T, D, N). dA, dD, dbias go through (B, D, ·)
 * partials and a reduce over b. On CPU adapters the chunks run in several dispatches, last
 * first, carrying the state gradient in the scratch, and dB/dC split their loop over channels.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { checkDistinct } from './attention_checks.ts';
import {
  at,
  checkCpuN,
  checkInputs,
  CPU_LOOP_BUDGET,
  dispatch,
  forwardChunks,
  packParams,
  pieces,
  SCAN_CHUNK,
  type ScanDims,
  scanStateShape,
  scanTuning,
} from './selective_scan.ts';

/**
 * Selective scan backward: given dout = ∂L/∂out (B, T, D) and the states from
 * {@link selectiveScanForward} (same inputs and dims), accumulates (+=) du, ddelta, dz (B, T, D),
 * dA (D, N), dB, dC (B, T, N), dD, dbias (D). dz must be given exactly when z is. Recomputes y
 * (when gated) and h per chunk; scratch from the pool: one [A | Dskip | bias | states | dh carry
 * | partials] buffer and, when gated, g (B, T, D) and a states copy; all released once encoded.
 * @throws Error as {@link selectiveScanForward}, when dz and z are not both given or both null,
 *   or when a gradient shares a GPUBuffer with another operand.
 */
export function selectiveScanBackward(
  gpu: Gpu,
  u: Tensor,
  delta: Tensor,
  A: Tensor,
  Bm: Tensor,
  Cm: Tensor,
  Dskip: Tensor,
  bias: Tensor,
  z: Tensor | null,
  states: Tensor,
  dout: Tensor,
  grads: {
    du: Tensor;
    ddelta: Tensor;
    dA: Tensor;
    dB: Tensor;
    dC: Tensor;
    dD: Tensor;
    dbias: Tensor;
    dz: Tensor | null;
  },
  s: ScanDims,
): void {
  const what = 'selectiveScanBackward';
  checkInputs(what, s, { u, delta, A, Bm, Cm, Dskip, bias, z, states, dout });
  checkCpuN(what, gpu, s);
  const { du, ddelta, dA, dB, dC, dD, dbias, dz } = grads;
  if ((z === null) !== (dz === null)) {
    throw new Error(`${what}: dz must be given exactly when z is (z ${z ? 'given' : 'null'})`);
  }
  checkInputs(what, s, { du, ddelta, dA, dB, dC, dD, dbias, dz });
  const ins: [string, Tensor][] = [
    ['u', u],
    ['delta', delta],
    ['A', A],
    ['Bm', Bm],
    ['Cm', Cm],
    ['Dskip', Dskip],
    ['bias', bias],
    ['states', states],
    ['dout', dout],
  ];
  if (z) ins.push(['z', z]);
  const outs: [string, Tensor][] = [['du', du], ['ddelta', ddelta], ['dA', dA], ['dB', dB], ['dC', dC], ['dD', dD], [
    'dbias',
    dbias,
  ]];
  if (dz) outs.push(['dz', dz]);
  checkDistinct(what, outs, ins);

  const { b, d, n } = s;
  if (gpu.isCpu && 3 * b > CPU_LOOP_BUDGET) {
    throw new Error(`${what}: batch b=${b} is over what one CPU-adapter dispatch can sum`);
  }
  const nc = Math.ceil(s.t / SCAN_CHUNK);
  const sz = b * d * nc * n;
  const dn = d * n;
  // wk = [A | Dskip | bias | states | dh carry | dA (B, D, N) | dD (B, D) | dbias (B, D)]
  const offSt = dn + 2 * d;
  const offs = [offSt, offSt + sz, offSt + 2 * sz, offSt + 2 * sz + b * dn, offSt + 2 * sz + b * dn + b * d];
  const wk = packParams(gpu, A, Dskip, bias, s, 2 * sz + b * dn + 2 * b * d, 'selective_scan.wk');
  const owned: Tensor[] = [wk];
  try {
    gpu.copy(states, at(wk, offSt, sz));
    let g = dout;
    if (z && dz) {
      // y is needed for dz: rerun the forward ungated into a scratch that then becomes g.
      const y = gpu.empty([b, s.t, d], 'f32', 'selective_scan.g');
      const st2 = gpu.empty(scanStateShape(s), 'f32', 'selective_scan.states2');
      owned.push(y, st2);
      forwardChunks(gpu, s, { 0: u, 1: delta, 2: Bm, 3: Cm, 4: u, 5: wk, 6: y, 7: st2 }, false);
      dispatch(gpu, 'selective_scan_bwd', 'gate_bwd', s, { 4: z, 8: dout, 12: y, 13: dz }, b * s.t * d, {
        c_lo: 0,
        c_hi: 0,
        d_lo: 0,
        d_hi: 0,
      });
      g = y;
    }
    const common = { 0: u, 1: delta, 2: Bm, 3: Cm, 8: g, 9: wk };
    const perChunk = 2 * SCAN_CHUNK + n * (2 * SCAN_CHUNK + 3) + 2;
    const chunks = pieces(nc, Math.floor(CPU_LOOP_BUDGET / perChunk), scanTuning.chunksPerDispatch, gpu.isCpu);
    for (const [lo, hi] of chunks.reverse()) {
      dispatch(gpu, 'selective_scan_bwd', 'bwd_main', s, { ...common, 10: du, 11: ddelta }, b * d, {
        c_lo: lo,
        c_hi: hi,
        d_lo: 0,
        d_hi: 0,
      }, { offs });
    }
    const perChannel = 2 * SCAN_CHUNK + 1;
    const chans = pieces(
      d,
      Math.floor((CPU_LOOP_BUDGET - SCAN_CHUNK) / perChannel),
      scanTuning.channelsPerDispatch,
      gpu.isCpu,
    );
    for (const [lo, hi] of chans) {
      dispatch(gpu, 'selective_scan_bwd', 'bwd_bc', s, { ...common, 14: dB, 15: dC }, b * nc * n, {
        c_lo: 0,
        c_hi: nc,
        d_lo: lo,
        d_hi: hi,
      }, { offs });
    }
    dispatch(gpu, 'selective_scan_bwd', 'bwd_reduce', s, { 9: wk, 16: dA, 17: dD, 18: dbias }, dn, {
      c_lo: 0,
      c_hi: 0,
      d_lo: 0,
      d_hi: 0,
    }, { offs });
  } finally {
    for (const t of owned) t.release();
  }
}
