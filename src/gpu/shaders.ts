/**
 * The one copy of every WGSL kernel is `shaders/NAME.wgsl`. Browser (Vite rewrites
 * `new URL(…, import.meta.url)` into an asset URL), Deno and Dawn all fetch it from there; the
 * device context (context.ts) loads them all once. The kernels that use them live in src/kernels.
 */

/** Every shader file the kernels use; `shaders/NAME.wgsl` must exist for each. */
export const SHADER_NAMES = [
  'matmul',
  // included by matmul (split-K reduce, operand padding)
  'matmul_passes',
  'matmul_plain',
  'matmul_tiled',
  'matmul_tiled_128',
  // the tiled matmuls' variants with subgroup operations, picked where the device has
  // subgroups (kernels/matmul.ts)
  'matmul_tiled_sg',
  'matmul_tiled_128_sg',
  // included by every tiled matmul
  'matmul_tiled_common',
  // f32 ↔ f16 casts (kernels/cast.ts)
  'cast',
  // bf16 rounding in f32 storage (kernels/cast.ts; no feature needed)
  'round_bf16',
  'reduce',
  // row reductions included by the row kernels (layernorm, rmsnorm, softmax_xent); the _sg
  // variant replaces the other where the device has subgroups (kernels/reduce.ts)
  'row_reduce',
  'row_reduce_sg',
  // column sums over chunks of rows, included by the norms and reduce
  'col_chunks',
  'elementwise',
  'layernorm',
  'softmax_xent',
  'embedding',
  'attention',
  'flash_attention',
  'flash_attention_bwd',
  'flash_attention_common',
  // the K/V (or Q/dO) workgroup tiles, included by the two tiled flash kernels that stage them
  'flash_attention_tiles',
  'flash_attention_tiled',
  // the tiled forward with subgroup shuffles instead of K/V tiles (kernels/flash_attention.ts)
  'flash_attention_tiled_sg',
  'flash_attention_tiled_bwd',
  // its subgroup variant (dQ, dK/dV reading the streamed rows by shuffle)
  'flash_attention_tiled_bwd_sg',
  'flash_attention_block',
  // exact top-k per row for top-k attention at inference (kernels/select_k.ts)
  'select_k',
  // one query row over a KV cache, and the cache append (kernels/decode_attention.ts)
  'decode_attention',
  'adamw',
  // linear attention (kernels/linear_attention.ts)
  'linear_attention',
  'linear_attention_bwd',
  'linear_attention_recurrent',
  // selective scan and the Mamba block's conv1d (kernels/selective_scan.ts, kernels/conv1d.ts)
  'selective_scan',
  'selective_scan_bwd',
  'conv1d',
  // model primitives (kernels/rmsnorm.ts, kernels/activations.ts)
  'rmsnorm',
  'activations',
  // NEFTune embedding noise (kernels/noise.ts)
  'noise',
  // mixture-of-experts routing, dispatch and combine (kernels/moe.ts, moe_gather.ts)
  'moe',
  // gradient/activation compressors (kernels/compress/)
  'compress_bf16',
  'compress_int4',
  'compress_int8',
  'compress_sign',
  'compress_topk',
  'powersgd',
] as const;

export type ShaderName = (typeof SHADER_NAMES)[number];

/** `//!include NAME` on a line of its own is replaced by shaders/NAME.wgsl (one level deep). */
const INCLUDE = /^\/\/!include (\w+)\s*$/gm;

/**
 * Loads all shader sources and expands their includes.
 * @throws Error naming the file that could not be read, or an include that does not exist.
 */
export async function loadShaders(): Promise<Record<ShaderName, string>> {
  const out = {} as Record<ShaderName, string>;
  await Promise.all(
    SHADER_NAMES.map(async (name) => {
      const url = new URL(`../../shaders/${name}.wgsl`, import.meta.url);
      let res: Response;
      try {
        res = await fetch(url);
      } catch (e) {
        throw new Error(`Cannot read shader ${url.href}: ${(e as Error).message}`);
      }
      if (!res.ok) throw new Error(`Cannot read shader ${url.href}: HTTP ${res.status}`);
      out[name] = await res.text();
    }),
  );
  for (const name of SHADER_NAMES) {
    out[name] = out[name].replace(INCLUDE, (_, inc: string) => {
      if (!(inc in out)) throw new Error(`shaders/${name}.wgsl includes '${inc}', which is not in SHADER_NAMES`);
      return out[inc as ShaderName];
    });
  }
  return out;
}
