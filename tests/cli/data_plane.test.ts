/**
 * The data-plane flags of a parallel run (docs/design.md#the-shared-data-plane-of-worker-ranks): `--data-plane` and
 * `--region-mb` come from PlanSchema, so train, plan and the demo share them; a worker world reports the plane it got
 * in one line for the log; ring sizes follow the plan.
 */
import { equal, match, ok, throws } from 'node:assert/strict';
import { parseCommandArgs } from '../../src/cli/command.ts';
import { openRunWorld } from '../../src/cli/run_world.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { planRegionBytes } from '../../src/parallel/plan/plan_schema.ts';
import { MIN_REGION_BYTES } from '../../src/comm/data_plane.ts';
import { WORKER_TEST } from '../comm/world.ts';
import { runCli, TINY_RUN } from '../util/cli.ts';

Deno.test('--data-plane and --region-mb parse for train and plan; a bad plane names the choices', () => {
  const a = parseCommandArgs(['--dp', '2', '--data-plane', 'message', '--region-mb', '8'], 'train');
  equal(a.options.dataPlane, 'message');
  equal(a.options.regionMb, 8);
  equal(parseCommandArgs(['--dp', '2', '--data-plane', 'shared'], 'plan').options.dataPlane, 'shared');
  throws(() => parseCommandArgs(['--dp', '2', '--data-plane', 'shm'], 'train'), /data-plane.*shared.*message/s);
});

Deno.test('ring bytes: twice the largest message the plan can send, or --region-mb', () => {
  const model = { nLayer: 2, nHead: 2, nEmbd: 64, blockSize: 32, batchSize: 8, vocabSize: 65 };
  const dp = planRegionBytes(makePlan({ dp: 2 }), model);
  ok(dp >= MIN_REGION_BYTES);
  // A rank's parameters: wte + wpe + 2 blocks ≈ 0.1 M floats; the batch rows 8·32·65 are fewer.
  ok(dp >= 2 * 4 * 100_000 && dp < 2 * 4 * 130_000 + 8192, `${dp}`);
  ok(planRegionBytes(makePlan({ tp: 2 }), model) < dp, 'a tp shard holds fewer parameters');
  equal(planRegionBytes(makePlan({ dp: 2 }), model, 3), 3 << 20);
});

for (const dataPlane of ['shared', 'message'] as const) {
  Deno.test({
    name: `a worker world on the ${dataPlane} plane says so in one line`,
    ...WORKER_TEST,
    fn: async () => {
      const launch = { transport: 'workers', commBackend: 'ours' } as const;
      const rw = await openRunWorld(launch, makePlan({ dp: 2 }), null, '', { dataPlane, regionBytes: 2 << 20 });
      try {
        match(
          rw.planeLine!,
          dataPlane === 'shared'
            ? /^data plane: shared \(SharedArrayBuffer rings of 2 MiB per pair of ranks\)$/
            : /^data plane: message \(MessagePorts\)$/,
        );
        equal((await rw.world.chromeTrace()).otherData?.dataPlane, dataPlane);
      } finally {
        await rw.close();
      }
    },
  });
}

Deno.test({
  name: 'train --dp 2 --data-plane message: the log names the plane and trace.json records it',
  ...WORKER_TEST,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'data-plane-' });
    try {
      const r = await runCli('train.ts', [
        '--dp',
        '2',
        '--data-plane',
        'message',
        ...TINY_RUN,
        '--steps',
        '2',
        '--out',
        dir,
      ]);
      equal(r.code, 0, `exit 0\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
      match(r.stdout, /^data plane: message \(MessagePorts\)$/m);
      equal(JSON.parse(await Deno.readTextFile(`${dir}/trace.json`)).otherData.dataPlane, 'message');
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
