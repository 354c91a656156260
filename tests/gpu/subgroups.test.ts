/**
 * The subgroup policy (src/gpu/context.ts `Gpu.subgroups`): off unless asked for, 'on' refused
 * with a clear line on a device without the feature, 'available' on exactly where the device has
 * it, and the kernels' gates follow the context, not the feature alone.
 */
import { equal, rejects } from 'node:assert/strict';
import { Gpu } from '../../src/gpu/context.ts';
import { testBackend } from '../util/gpu.ts';
import { subgroupMatmul } from '../../src/kernels/matmul.ts';
import { subgroupFlash } from '../../src/kernels/flash_tuning.ts';
import { subgroupRows } from '../../src/kernels/reduce.ts';

const gates = (gpu: Gpu) => [subgroupMatmul(gpu), subgroupFlash(gpu), subgroupRows(gpu)].join();

Deno.test({
  name: 'subgroup kernels: off by default, on where asked for and offered, a clear refusal where not offered',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const plain = await Gpu.create({ backend: testBackend() });
    const has = plain.features.has('subgroups');
    try {
      equal(plain.subgroups, false, 'default off, whatever the adapter offers');
      equal(gates(plain), 'false,false,false');
    } finally {
      plain.destroy();
    }
    const avail = await Gpu.create({ backend: testBackend(), subgroups: 'available' });
    try {
      equal(avail.subgroups, has);
      equal(gates(avail), [has, has, has].join());
    } finally {
      avail.destroy();
    }
    if (has) {
      const on = await Gpu.create({ backend: testBackend(), subgroups: 'on' });
      equal(on.subgroups, true);
      on.destroy();
    } else {
      await rejects(
        Gpu.create({ backend: testBackend(), subgroups: 'on' }),
        /--subgroups on: the \w+ adapter '.*' does not offer the 'subgroups' feature .*use --subgroups off/,
      );
    }
    await rejects(
      Gpu.create({ backend: testBackend(), subgroups: 'yes' as 'on' }),
      /--subgroups must be on or off, got 'yes'/,
    );
  },
});
