// FlashAttention at the sequence lengths where CPU adapters split their dispatches: one whole
// flashCpuChunk(128) of rows, and past it. Apart from the f64-reference cases of
// flash_attention.test.ts because a full reference over T×T at these lengths is too slow; these
// check the rows that run the most loop iterations against direct f64 sums, or a closed form.
import { gpuTest } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { flashAttentionBackward, flashAttentionForward, flashCpuChunk } from '../../src/kernels/flash_attention.ts';

gpuTest(
  'flash attention streaming the longest chunk a CPU adapter runs in one dispatch (hs=128)',
  async (gpu) => {
    // T = one full chunk: the busiest invocations run the most loop iterations one dispatch
    // allows (lavapipe cuts one off silently past 65 535): forward and dQ of the last queries,
    // dK/dV of the first keys. Checks exactly those rows against f64, whose every entry needs
    // the whole T×T score matrix once.
    const hs = 128;
    const t = gpu.isCpu ? flashCpuChunk(hs) : 4096;
    const d = { b: 1, t, c: hs, nh: 1, causal: false };
    const c = hs;
    const qkv = randn(t * 3 * c, 71, -2, 2);
    const dy = randn(t * c, 72);
    const scale = 1 / Math.sqrt(hs);
    const at = (tok: number, which: number, i: number) => qkv[tok * 3 * c + which * c + i];
    const checkQ = [t - 4, t - 3, t - 2, t - 1];
    const checkK = [0, 1, 2, 3];
    const yRef = new Float64Array(checkQ.length * c);
    const lRef = new Float64Array(checkQ.length);
    const dqRef = new Float64Array(checkQ.length * c);
    const dkRef = new Float64Array(checkK.length * c);
    const dvRef = new Float64Array(checkK.length * c);
    const p = new Float64Array(t);
    const dp = new Float64Array(t);
    for (let q = 0; q < t; q++) {
      let mx = -Infinity;
      for (let s = 0; s < t; s++) {
        let dot = 0;
        let dpv = 0;
        for (let i = 0; i < c; i++) {
          dot += at(q, 0, i) * at(s, 1, i);
          dpv += dy[q * c + i] * at(s, 2, i);
        }
        p[s] = dot * scale;
        dp[s] = dpv;
        mx = Math.max(mx, p[s]);
      }
      let sum = 0;
      for (let s = 0; s < t; s++) sum += p[s] = Math.exp(p[s] - mx);
      let dsum = 0;
      for (let s = 0; s < t; s++) {
        p[s] /= sum;
        dsum += p[s] * dp[s];
      }
      const qi = checkQ.indexOf(q);
      if (qi >= 0) {
        lRef[qi] = mx + Math.log(sum);
        for (let s = 0; s < t; s++) {
          const ds = p[s] * (dp[s] - dsum) * scale;
          for (let i = 0; i < c; i++) {
            yRef[qi * c + i] += p[s] * at(s, 2, i);
            dqRef[qi * c + i] += ds * at(s, 1, i);
          }
        }
      }
      for (let ki = 0; ki < checkK.length; ki++) {
        const s = checkK[ki];
        const ds = p[s] * (dp[s] - dsum) * scale;
        for (let i = 0; i < c; i++) {
          dvRef[ki * c + i] += p[s] * dy[q * c + i];
          dkRef[ki * c + i] += ds * at(q, 0, i);
        }
      }
    }
    const tqkv = gpu.upload(Float32Array.from(qkv), [1, t, 3 * c]);
    const tdy = gpu.upload(Float32Array.from(dy), [1, t, c]);
    const ty = gpu.empty([1, t, c]);
    const tlse = gpu.empty([1, 1, t]);
    const tdqkv = gpu.zeros([1, t, 3 * c]);
    flashAttentionForward(gpu, tqkv, ty, tlse, d);
    flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d);
    const y = await gpu.read(ty);
    const lse = await gpu.read(tlse);
    const g = await gpu.read(tdqkv);
    const rows = (a: ArrayLike<number>, toks: number[], lo: number, stride: number) =>
      toks.flatMap((tok) => Array.from({ length: c }, (_, i) => a[tok * stride + lo + i]));
    assertClose(rows(y, checkQ, 0, c), yRef, 'y (last rows)');
    assertClose(checkQ.map((q) => lse[q]), lRef, 'lse (last rows)');
    assertClose(rows(g, checkQ, 0, 3 * c), dqRef, 'dq (last rows)');
    assertClose(rows(g, checkK, c, 3 * c), dkRef, 'dk (first rows)');
    assertClose(rows(g, checkK, 2 * c, 3 * c), dvRef, 'dv (first rows)');
    for (const x of [tqkv, tdy, ty, tlse, tdqkv]) x.release();
  },
);

gpuTest(
  'flash attention over two default chunks (T = flashCpuChunk(128) + 68, closed form)',
  async (gpu) => {
    // q = k = 0: every row attends uniformly to the keys it sees (P = 1/(t+1) when causal), so
    // with v_s = s and dO = 1: y_t = t/2, L_t = log(t+1), dV_s = Σ_{t≥s} 1/(t+1), dQ = dK = 0.
    // On CPU adapters this takes two dispatches per kernel at their real chunk size.
    const hs = 128;
    const t = flashCpuChunk(hs) + 68;
    const c = hs;
    const d = { b: 1, t, c, nh: 1, causal: true };
    const qkv = new Float32Array(t * 3 * c);
    for (let s = 0; s < t; s++) qkv.fill(s, s * 3 * c + 2 * c, (s + 1) * 3 * c);
    const tqkv = gpu.upload(qkv, [1, t, 3 * c]);
    const tdy = gpu.upload(new Float32Array(t * c).fill(1), [1, t, c]);
    const ty = gpu.empty([1, t, c]);
    const tlse = gpu.empty([1, 1, t]);
    const tdqkv = gpu.zeros([1, t, 3 * c]);
    flashAttentionForward(gpu, tqkv, ty, tlse, d);
    flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d);
    const y = await gpu.read(ty);
    const lse = await gpu.read(tlse);
    const g = await gpu.read(tdqkv);
    const rows = Array.from({ length: t }, (_, i) => i);
    assertClose(y, rows.flatMap((i) => new Array(c).fill(i / 2)), 'y');
    assertClose(lse, rows.map((i) => Math.log(i + 1)), 'lse');
    const suffix = new Float64Array(t + 1);
    for (let i = t - 1; i >= 0; i--) suffix[i] = suffix[i + 1] + 1 / (i + 1);
    const dv = rows.flatMap((s) => Array.from({ length: c }, (_, i) => g[s * 3 * c + 2 * c + i]));
    assertClose(dv, rows.flatMap((s) => new Array(c).fill(suffix[s])), 'dv');
    const dqk = rows.flatMap((s) => Array.from(g.subarray(s * 3 * c, s * 3 * c + 2 * c)));
    assertClose(dqk, new Float64Array(dqk.length), 'dq, dk');
    for (const x of [tqkv, tdy, ty, tlse, tdqkv]) x.release();
  },
);
