import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import {
  explorePlans,
  type ExplorerSpec,
  memorySegments,
  segmentWidths,
  timeSegments,
} from '../../src/app/panels/plan_explore.ts';
import { DEVICE_PROFILES } from '../../src/perf/device_profile.ts';
import { MODEL_PRESETS } from '../../src/perf/model_presets.ts';
import { stepMemory } from '../../src/perf/step_memory.ts';
import { TIE_DIGITS } from '../../src/perf/plan_order.ts';

const CLUSTER: Omit<ExplorerSpec, 'model' | 'world'> = {
  device: 'h100-sxm',
  net: 'nvlink-ib',
  dtype: 'bf16',
  attention: 'flash',
};
const close = (a: number, b: number, what: string) =>
  ok(Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b)), `${what}: ${a} vs ${b}`);
const sum = (xs: { value: number }[]) => xs.reduce((a, x) => a + x.value, 0);

Deno.test('plan explorer: the top 10, fastest first, each step and memory split into parts that sum to it', () => {
  const r = explorePlans({ ...CLUSTER, model: 'megatron-1.7b', world: 8 });
  if (!r.ok) throw new Error(r.message);
  equal(r.rows.length, 10);
  equal(r.deviceMemory, DEVICE_PROFILES['h100-sxm'].memoryBytes);
  equal(r.valid, r.ranked + r.overMemory, 'every valid plan ranked or dropped for memory');
  ok(r.why.startsWith('why: '), r.why);
  const model = { ...MODEL_PRESETS['megatron-1.7b'] };
  r.rows.forEach((row, i) => {
    equal(row.rank, i + 1);
    // Fastest first to the order's tie precision (src/perf/plan_order.ts); ties are broken by its other keys.
    const tied = (x: number) => Number(x.toPrecision(TIE_DIGITS));
    if (i) ok(tied(row.step) >= tied(r.rows[i - 1].step), 'ranked by predicted step time');
    deepStrictEqual(row.time.map((s) => s.key), [
      'compute',
      'comm-dp',
      'comm-tp',
      'comm-pp',
      'comm-cp',
      'bubble',
      'optimizer',
    ]);
    close(sum(row.time), row.step, `time parts of plan ${row.rank}`);
    close(sum(row.memory), row.memoryTotal, `memory parts of plan ${row.rank}`);
    const m = stepMemory(row.plan, model, { ...CLUSTER, recompute: row.recompute } as never);
    close(row.memoryTotal, m.total, 'the search’s own memory figure');
    ok(row.memoryTotal <= r.deviceMemory, 'never a plan over memory');
  });
  // Widths on the slowest plan's scale: the slowest bar is 100 %, the others in proportion.
  const scale = Math.max(...r.rows.map((x) => x.step));
  for (const row of r.rows) {
    const w = segmentWidths(row.time, scale).reduce((a, x) => a + x, 0);
    close(w, (100 * row.step) / scale, 'bar width');
  }
});

Deno.test('plan explorer: a model that fits nowhere says no plan fits; bad input says what is wrong', () => {
  const r = explorePlans({ ...CLUSTER, model: 'gpt3-175b', world: 8 });
  equal(r.ok, false);
  if (r.ok) return;
  ok(r.noFit);
  ok(/^no plan fits h100-sxm's 80 GiB on 8 ranks: the smallest needs [\d.]+ GiB per rank/.test(r.message), r.message);
  const bad = explorePlans({ ...CLUSTER, model: 'gpt-9', world: 8 });
  ok(!bad.ok && !bad.noFit && /unknown model 'gpt-9'/.test(bad.message));
  const world = explorePlans({ ...CLUSTER, model: 'megatron-1.7b', world: 0 });
  ok(!world.ok && /world size must be a whole number from 1 to 4096, got 0/.test(world.message));
  const dev = explorePlans({ ...CLUSTER, device: 'tpu', model: 'megatron-1.7b', world: 8 });
  ok(!dev.ok && /unknown device 'tpu'; allowed: h100-sxm/.test(dev.message));
  const net = explorePlans({ ...CLUSTER, net: 'wifi', model: 'megatron-1.7b', world: 8 });
  ok(!net.ok && /network/.test(net.message));
});

Deno.test('plan explorer: custom dimensions, a global batch, f32 states by rankMemory', () => {
  const r = explorePlans({
    ...CLUSTER,
    dtype: 'f32',
    model: 'layers=4,heads=4,hidden=256,seq=128,vocab=65',
    world: 4,
    globalBatch: 32,
    top: 3,
  });
  if (!r.ok) throw new Error(r.message);
  equal(r.model.batchSize, 32);
  equal(r.model.nLayer, 4);
  equal(r.rows.length, 3);
  for (const row of r.rows) close(sum(row.memory), row.memoryTotal, 'f32 memory parts');
  const [row] = r.rows,
    m = memorySegments(row.plan, r.model, { dtype: 'f32', attention: 'flash', recompute: row.recompute });
  deepStrictEqual(m.segments.map((s) => s.key), ['params', 'grads', 'optimizer', 'activations']);
});

Deno.test('plan explorer: timeSegments shows ep only when the prediction has it', () => {
  const p = { compute: 1, exposed: { dp: 0.1, tp: 0.2, pp: 0, cp: 0, ep: 0 }, bubble: 0.3, optimizer: 0.05 } as never;
  deepStrictEqual(timeSegments(p).map((s) => s.key), [
    'compute',
    'comm-dp',
    'comm-tp',
    'comm-pp',
    'comm-cp',
    'bubble',
    'optimizer',
  ]);
  const q = { compute: 1, exposed: { dp: 0, tp: 0, pp: 0, cp: 0, ep: 0.4 }, bubble: 0, optimizer: 0 } as never;
  ok(timeSegments(q).some((s) => s.key === 'comm-ep'));
  deepStrictEqual(segmentWidths([{ key: 'a', label: 'a', value: 1 }], 0), [0]);
});
