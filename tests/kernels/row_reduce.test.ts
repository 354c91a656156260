/**
 * The choice between the row reductions (shaders/row_reduce.wgsl and row_reduce_sg.wgsl) and
 * the subgroup layout the subgroup variant relies on. The kernels' results under each variant
 * are checked by the layernorm, rmsnorm and cross-entropy tests (tests/util/row_variants.ts).
 */
import { gpuTest, testBackend } from '../util/gpu.ts';
import { rowKernel, rowTuning } from '../../src/kernels/reduce.ts';
import { layerNormForward } from '../../src/kernels/layernorm.ts';
import { dispatchedKeys, subgroupTest } from '../util/row_variants.ts';
import type { Gpu } from '../../src/gpu/context.ts';

gpuTest('row kernels reduce with subgroups exactly where the adapter has them', (gpu) => {
  const has = gpu.features.has('subgroups');
  // Dawn offers subgroups on every adapter the suite runs on (SwiftShader included), so a Dawn
  // run without them means the device was opened without the feature, and every subgroup test
  // would be ignored rather than run.
  if (testBackend() === 'dawn' && !has) {
    throw new Error(`Dawn device on ${gpu.adapterDescription} lacks 'subgroups'`);
  }
  const key = (lanes: number) => {
    rowTuning.lanes = lanes;
    return rowKernel(gpu, 'layernorm', 'forward', 1000, 8).kernel.key;
  };
  try {
    for (const lanes of [2, 4, 64, 256]) {
      const want = has ? `layernorm.forward.L${lanes}.W256.sg` : `layernorm.forward.L${lanes}.W256`;
      if (key(lanes) !== want) throw new Error(`lanes ${lanes}: key ${key(lanes)}, expected ${want}`);
    }
    // One lane reduces nothing, so it keeps the tree's pipeline.
    if (key(1).endsWith('.sg')) throw new Error(`one lane per row got a subgroup pipeline: ${key(1)}`);
    rowTuning.subgroups = false;
    if (key(16).endsWith('.sg')) throw new Error(`rowTuning.subgroups = false still gave ${key(16)}`);
  } finally {
    rowTuning.lanes = null;
    rowTuning.subgroups = true;
  }
});

await subgroupTest('a subgroup row kernel is what runs, and its output is finite', async (gpu) => {
  const n = 5, c = 300;
  const x = gpu.upload(Float32Array.from({ length: n * c }, (_, i) => Math.sin(i)), [n, c]);
  const w = gpu.upload(new Float32Array(c).fill(1), [c]), b = gpu.zeros([c]);
  const y = gpu.empty([n, c]), mean = gpu.empty([n]), rstd = gpu.empty([n]);
  rowTuning.lanes = 64;
  let keys: string[];
  try {
    keys = await dispatchedKeys(gpu, () => layerNormForward(gpu, x, w, b, y, mean, rstd));
  } finally {
    rowTuning.lanes = null;
  }
  if (keys.join() !== 'layernorm.forward.L64.W256.sg') throw new Error(`dispatched ${keys.join(', ')}`);
  const r = await gpu.read(rstd);
  if (!r.every((v) => Number.isFinite(v) && v > 0)) throw new Error(`rstd ${r}`);
  for (const t of [x, w, b, y, mean, rstd]) t.release();
});

/** Per invocation of `groups` workgroups of `wg`: [subgroup lane, subgroup size, first lid of its subgroup, active count]. */
async function subgroupLayout(gpu: Gpu, wg: number, groups: number): Promise<Uint32Array> {
  const code = `enable subgroups;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(${wg})
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) size: u32,
) {
  let i = (wid.x * ${wg}u + lid) * 4u;
  out[i] = lane;
  out[i + 1u] = size;
  out[i + 2u] = subgroupMin(lid);
  out[i + 3u] = subgroupAdd(1u);
}`;
  const out = gpu.zeros([wg * groups * 4], 'u32');
  gpu.dispatch({ key: `test.subgroup_layout.${wg}`, code, entryPoint: 'main' }, [out], null, [groups]);
  const r = await gpu.read(out);
  out.release();
  return r as Uint32Array;
}

// row_reduce_sg.wgsl, matmul_tiled*_sg.wgsl and flash_attention_tiled{,_bwd}_sg.wgsl assume that
// invocation lid of a 1D workgroup is lane lid % S of a subgroup made of invocations
// lid − lane … lid − lane + S − 1, all active except those past the end of the workgroup. WGSL
// does not promise it, so it is checked here for the workgroup sizes those kernels use (the
// row kernels 64 on CPU adapters and 256 elsewhere, the matmuls 256, the flash kernels their Br
// of 16, 32 or 64).
for (const wg of [16, 32, 64, 256]) {
  await subgroupTest(
    `subgroup layout in a workgroup of ${wg}: lid = subgroup·size + lane, full subgroups`,
    async (gpu) => {
      const r = await subgroupLayout(gpu, wg, 3);
      for (let i = 0; i < r.length / 4; i++) {
        const lid = i % wg, [lane, size, first, count] = r.subarray(4 * i, 4 * i + 4);
        const ok = size >= 1 && (size & (size - 1)) === 0 && lane === lid % size && first === lid - lane &&
          count === Math.min(size, wg - first);
        if (!ok) {
          throw new Error(
            `workgroup of ${wg}, invocation ${lid}: lane ${lane}, subgroup size ${size}, ` +
              `first lid ${first}, ${count} active — not the layout the subgroup kernels assume`,
          );
        }
      }
    },
  );
}
