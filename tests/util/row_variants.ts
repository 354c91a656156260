/**
 * Runs a kernel's test once per variant (docs/design.md#row-reductions): the workgroup-memory path every
 * adapter has, and subgroup operations where the adapter offers `subgroups` (Dawn on SwiftShader
 * does; Deno's wgpu on lavapipe does not). Row kernels (the reduction tree or subgroups) and the
 * tiled matmuls use it.
 */
import type { Gpu } from '../../src/gpu/context.ts';
import { rowTuning } from '../../src/kernels/reduce.ts';
import { testBackend, testGpu } from './gpu.ts';

export type RowVariant = 'tree' | 'subgroup';

/**
 * Lanes per row the variant tests force: fewer than, as many as and more than a subgroup of 4
 * (SwiftShader's size) or 32, which covers both paths of the subgroup reduction.
 */
export const VARIANT_LANES = [2, 4, 16, 256] as const;

/** Row lengths that are not multiples of any lane count, subgroup or vector width. */
export const RAGGED_ROWS = [1, 3, 67, 257, 1000] as const;

/** Pipeline keys of kernels that use subgroup operations end with this. */
const SG_SUFFIX = '.sg';

/**
 * Calls `fn` while recording the key of every dispatch on `gpu`, and returns the keys.
 * Wraps `gpu.dispatch` for the duration, so other work on the same context must not overlap.
 */
export async function dispatchedKeys(gpu: Gpu, fn: () => Promise<void> | void): Promise<string[]> {
  const keys: string[] = [];
  const dispatch = gpu.dispatch;
  gpu.dispatch = (k, bindings, params, workgroups) => {
    keys.push(k.key);
    dispatch.call(gpu, k, bindings, params, workgroups);
  };
  try {
    await fn();
  } finally {
    gpu.dispatch = dispatch;
  }
  return keys;
}

/** Suffix of a test's name when it is registered as ignored for want of `subgroups`. */
const NO_SUBGROUPS = "not run, the adapter lacks 'subgroups'";

/**
 * Whether a subgroup test is skipped for want of `subgroups`: only off Dawn. Dawn offers them on
 * every adapter the suite runs on (SwiftShader included), so there the missing feature is a
 * device opened wrongly, and the test is registered to fail rather than skip.
 */
function skipMissing(has: boolean): boolean {
  return !has && testBackend() !== 'dawn';
}

/** Throws when a subgroup test runs on a device without `subgroups` (Dawn, see {@link skipMissing}). */
function requireSubgroups(gpu: Gpu): void {
  if (!gpu.features.has('subgroups')) {
    throw new Error(`${testBackend()} device on ${gpu.adapterDescription} lacks 'subgroups'`);
  }
}

/**
 * Registers a GPU test that needs `subgroups`; where the adapter lacks them it is registered as
 * ignored, saying so in its name, rather than passing without running (on Dawn it fails, see
 * {@link skipMissing}). Opens the test GPU (to read its features), so callers await it at the top
 * level.
 */
export async function subgroupTest(name: string, fn: (gpu: Gpu) => Promise<void>): Promise<void> {
  const skip = skipMissing((await testGpu()).features.has('subgroups'));
  Deno.test({
    name: skip ? `${name} [${NO_SUBGROUPS}]` : name,
    ignore: skip,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const gpu = await testGpu();
      requireSubgroups(gpu);
      await fn(gpu);
    },
  });
}

/** A kernel family's tuning switch: `subgroups = false` forces its fallback (rowTuning, matmulTuning). */
export interface SubgroupSwitch {
  subgroups: boolean;
}

/**
 * Registers `name` once per variant of a kernel family: `fallback` (the label of the variant
 * every adapter has) with `tuning.subgroups` false, then 'subgroup' with it true; `cleanup`
 * runs after each, and `tuning.subgroups` is restored to true. Each run fails unless a pipeline
 * of its own variant ran (key suffix '.sg' for subgroups) and none of the other, so a gate that
 * silently falls back cannot pass. Where the adapter lacks `subgroups` the subgroup run is
 * registered as ignored, saying so in its name (on Dawn it fails, see {@link skipMissing}). Opens
 * the test GPU (to read its features), so callers await it at the top level.
 */
export async function subgroupVariantTest<V extends string>(
  name: string,
  tuning: SubgroupSwitch,
  fallback: V,
  fn: (gpu: Gpu, variant: V | 'subgroup') => Promise<void>,
  cleanup: () => void = () => {},
): Promise<void> {
  const hasSubgroups = (await testGpu()).features.has('subgroups');
  for (const variant of [fallback, 'subgroup'] as const) {
    const missing = variant === 'subgroup' && skipMissing(hasSubgroups);
    Deno.test({
      name: `${name} [${variant}${missing ? `: ${NO_SUBGROUPS}` : ''}]`,
      ignore: missing,
      sanitizeResources: false,
      sanitizeOps: false,
      fn: async () => {
        const gpu = await testGpu();
        if (variant === 'subgroup') requireSubgroups(gpu);
        tuning.subgroups = variant === 'subgroup';
        let keys: string[];
        try {
          keys = await dispatchedKeys(gpu, () => fn(gpu, variant));
        } finally {
          tuning.subgroups = true;
          cleanup();
        }
        const sg = keys.filter((k) => k.endsWith(SG_SUFFIX));
        if (variant === 'subgroup' && sg.length === 0) {
          throw new Error(`no subgroup pipeline ran; dispatched: ${[...new Set(keys)].join(', ')}`);
        }
        if (variant !== 'subgroup' && sg.length > 0) {
          throw new Error(`subgroup pipelines ran with subgroups off: ${[...new Set(sg)].join(', ')}`);
        }
      },
    });
  }
}

/**
 * Registers a row kernel's test once per row-reduction variant ({@link subgroupVariantTest} with
 * `rowTuning`); `fn` sets `rowTuning.lanes`, which is restored afterwards.
 */
export function rowVariantTest(
  name: string,
  fn: (gpu: Gpu, variant: RowVariant) => Promise<void>,
): Promise<void> {
  return subgroupVariantTest(name, rowTuning, 'tree', fn, () => {
    rowTuning.lanes = null;
  });
}
