/**
 * KV-cache decoding with the cache sharded along T across a cp group of in-process ranks
 * (src/models/kv_shard.ts, docs/design.md#tree-attention-decoding): every rank's logits at every step equal the
 * single-rank KvDecoder's within the f32 bounds of docs/design.md#test-tolerances, tree and ring decode, cp 2 and 3,
 * gpt, gpt-moe, the hybrid (its Mamba layers' carried states replicated on every rank), recurrent depth (a cache per
 * core iteration) and the linear attention (carried states only, no K or V), a prompt and steps that cross the shard
 * boundaries (so later ranks start empty and fill in turn); each rank holds only its part of the cache; overflow is
 * refused on every rank.
 */
import { equal, rejects } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, rng } from '../util/assert.ts';
import { createModel } from '../../src/models/registry.ts';
import { KvDecoder } from '../../src/models/decode.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import type { DecodeCombine } from '../../src/models/tree_decode.ts';

const V = 37, BLOCK = 16;

const MOE = { arch: 'gpt-moe', nExpert: 4, moeTopK: 2, capacityFactor: 2, moeEvery: 1 } as const;
const DEPTH = { arch: 'recurrent-depth', nLayer: 3, preludeLayers: 1, codaLayers: 1, evalIterations: 2 } as const;
// [method, cp, B, architecture, attention layers cached]: gpt-moe routes the same tokens as the
// single-rank decoder does; recurrent depth caches P + Q + r = 4 layers; the linear attention none.
const CASES: [DecodeCombine, number, number, Partial<TrainConfig>, number][] = [
  ['tree', 2, 1, { arch: 'gpt' }, 2],
  ['tree', 3, 2, { arch: 'gpt' }, 2],
  ['ring', 2, 1, { arch: 'gpt' }, 2],
  ['ring', 3, 2, { arch: 'gpt' }, 2],
  ['tree', 2, 1, MOE, 2],
  ['tree', 3, 1, { arch: 'hybrid', attnEvery: 1 }, 2],
  ['ring', 2, 2, DEPTH, 4],
  ['tree', 2, 2, { arch: 'linear', linearDecay: 'channel' }, 0],
];

for (const [method, cp, b, arch, layers] of CASES) {
  gpuTest(
    `sharded KV-cache decoding equals single-rank decoding: ${method} cp=${cp} B=${b} ${arch.arch}`,
    async (gpu) => {
      const cfg = parseConfig({ nLayer: 2, ...arch, nHead: 2, nEmbd: 32, blockSize: BLOCK });
      const model = createModel(gpu, cfg, V, 7);
      // Weights off their small initial values, so attention is far from uniform.
      const r = rng(11), w = Float32Array.from(await gpu.read(model.params.values));
      for (let i = 0; i < w.length; i++) w[i] += 0.3 * (r() - 0.5);
      gpu.write(model.params.values, w);
      // The prompt reaches past rank 0 (caps 8, 8 and 6, 5, 5), the steps fill every shard.
      const prompt = cp === 2 ? 10 : 7, steps = BLOCK - prompt;
      const ids = Int32Array.from({ length: b * BLOCK }, () => Math.floor(r() * V));
      const rowsAt = (pos: number) => Int32Array.from({ length: b }, (_, row) => ids[row * BLOCK + pos]);
      const promptIds = new Int32Array(b * prompt);
      for (let row = 0; row < b; row++) promptIds.set(ids.subarray(row * BLOCK, row * BLOCK + prompt), row * prompt);

      const single = new KvDecoder(model, { batch: b });
      const want = [await single.prefill(promptIds)];
      for (let s = 0; s < steps; s++) want.push(await single.step(rowsAt(prompt + s)));
      single.release();

      const world = localWorld(cp);
      try {
        const got = await onEveryRank(world, async (comm) => {
          const dec = new KvDecoder(model, { batch: b, cp: { comm, method } });
          try {
            const out = [await dec.prefill(promptIds)];
            for (let s = 0; s < steps; s++) out.push(await dec.step(rowsAt(prompt + s)));
            equal(dec.position, BLOCK);
            // This rank holds its part of Tmax only: 2·L·B·cap·C·4 bytes.
            equal(dec.cache.bytes, 2 * layers * b * Math.ceil((BLOCK - comm.rank) / cp) * 32 * 4);
            await rejects(dec.step(rowsAt(0)), /KV cache overflow/);
            return out;
          } finally {
            dec.release();
          }
        });
        for (const [rank, out] of got.entries()) {
          for (const [s, logits] of out.entries()) {
            assertClose(logits, want[s], `rank ${rank} step ${s}`);
            assertRelRms(logits, want[s], `rank ${rank} step ${s}`);
          }
        }
      } finally {
        closeLocalWorld(world);
      }
    },
  );
}
