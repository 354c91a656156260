/**
 * The kernels' subgroup policy (`--subgroups`, `Gpu.subgroups`): the subgroup variants of the
 * tiled matmuls, FlashAttention and the row reductions are opt-in, because on the one GPU
 * measured (an H100 under Dawn) they were slower than the workgroup-memory kernels
 * (docs/design.md#subgroup-paths-of-the-matmul-and-flash-inner-loops).
 */
import type { OpenedDevice, OpenOptions } from './device.ts';

/** The values of `--subgroups` (and 'available', which the tests use). */
export const SUBGROUP_CHOICES = ['off', 'on', 'available'] as const;
export type SubgroupChoice = (typeof SUBGROUP_CHOICES)[number];

/** What `Gpu.create` takes: how to open the device, and the kernels' subgroup policy. */
export interface GpuOptions extends Pick<OpenOptions, 'backend' | 'log' | 'maxLimits' | 'adapter'> {
  /**
   * The subgroup kernel variants: 'off' (default), 'on' (an error on a device without
   * `subgroups`), or 'available' (on where the device has them; the tests).
   */
  subgroups?: SubgroupChoice;
}

/** The values a user may give `--subgroups` ('available' is the tests'). */
export type SubgroupFlag = 'on' | 'off';

/**
 * The `--subgroups` flag of train, scale and bench, checked as it is read (undefined stays
 * undefined: the default, off).
 * @throws Error naming the allowed values.
 */
export function parseSubgroupsFlag(value: string | undefined): SubgroupFlag | undefined {
  if (value !== undefined && value !== 'on' && value !== 'off') {
    throw new Error(`--subgroups must be on or off, got '${value}'`);
  }
  return value;
}

/**
 * `choice` (default 'off'), checked before a device is opened.
 * @throws Error naming the allowed values.
 */
export function checkSubgroupChoice(choice: SubgroupChoice = 'off'): SubgroupChoice {
  if (!SUBGROUP_CHOICES.includes(choice)) throw new Error(`--subgroups must be on or off, got '${choice}'`);
  return choice;
}

/**
 * Whether kernels on `opened` take their subgroup variants under `choice`.
 * @throws Error for 'on' on a device without the `subgroups` feature, naming the adapter.
 */
export function subgroupsFor(choice: SubgroupChoice, opened: OpenedDevice): boolean {
  const has = opened.features.includes('subgroups');
  if (choice === 'on' && !has) {
    throw new Error(
      `--subgroups on: the ${opened.backend} adapter '${opened.adapterInfo.description}' does not offer the 'subgroups' feature (Dawn does on the adapters measured; Deno's wgpu does not): use --subgroups off`,
    );
  }
  return choice !== 'off' && has;
}
