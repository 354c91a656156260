/**
 * src/cli/parallel_args.ts: an experiment's typed parallel run becomes the parsed flags of the
 * same `npm run train` run; plan keys and values are checked before anything starts.
 */
import { deepStrictEqual, equal, throws } from 'node:assert/strict';
import { parallelArgs, planFlags } from '../../src/cli/parallel_args.ts';
import { parseCommandArgs } from '../../src/cli/command.ts';

Deno.test('parallelArgs: the options give the parsed flags of the same command line', () => {
  const o = {
    plan: {
      dp: 2,
      sync: 'diloco' as const,
      innerSteps: 10,
      sp: false,
      net: 'intra=100GB/s,2us;inter=1GB/s,20us;node=2',
    },
    config: { steps: 4, nLayer: 1, lr: 3e-3 },
    out: 'runs/x',
    gpu: 'wgpu' as const,
  };
  const { argv, args } = parallelArgs(o);
  deepStrictEqual(argv, [
    '--dp',
    '2',
    '--sync',
    'diloco',
    '--inner-steps',
    '10',
    '--sp',
    'false',
    '--net',
    'intra=100GB/s,2us;inter=1GB/s,20us;node=2',
  ]);
  const cli = parseCommandArgs([
    ...argv,
    '--steps',
    '4',
    '--n-layer',
    '1',
    '--lr',
    '3e-3',
    '--out',
    'runs/x',
    '--gpu',
    'wgpu',
  ], 'parallel');
  deepStrictEqual(args.options, cli.options);
  deepStrictEqual(args.overrides, cli.overrides);
  deepStrictEqual([args.out, args.gpu, args.preset, args.resume], [cli.out, cli.gpu, cli.preset, cli.resume]);
  deepStrictEqual(planFlags({ dp: 4, microBatches: undefined }), ['--dp', '4']);
});

Deno.test('parallelArgs: an unknown plan key, a refused value or an unknown GPU is one clear error', () => {
  const base = { config: {}, out: 'runs/x' };
  throws(
    () => parallelArgs({ ...base, plan: { dp: 2, dataParallel: 2 } as never }),
    /unknown plan key dataParallel; allowed: dp, tp/,
  );
  throws(() => parallelArgs({ ...base, plan: { dp: 0 } }), /^Error: trainParallel: dp 0 is below the minimum 1$/);
  throws(
    () => parallelArgs({ ...base, plan: { ppSchedule: 'zigzag' as never } }),
    /ppSchedule must be one of gpipe, 1f1b, interleaved, zb-h1, got 'zigzag'/,
  );
  throws(
    () => parallelArgs({ ...base, plan: {}, gpu: 'browser' as never }),
    /gpu must be one of auto, wgpu, dawn, got 'browser'/,
  );
  equal(parallelArgs({ ...base, plan: {} }).args.gpu, 'auto');
});
