/**
 * `npm run plan -- --calibrate --out profile.json [--gpu auto|wgpu|dawn] [--adapter A] [--quick]`: measures this
 * adapter and the worker data planes (src/bench/calibrate.ts), prints each figure, and writes a device profile that
 * `--device profile.json` reads (src/perf/device_profile.ts DeviceProfileSchema).
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { Gpu } from '../gpu/context.ts';
import type { Backend } from '../gpu/device.ts';
import { calibrate } from '../bench/calibrate.ts';
import { DeviceProfileSchema } from '../perf/device_profile.ts';

/** Whether `argv` asks for a calibration rather than a plan. */
export const isCalibrateArgv = (argv: string[]) => argv.includes('--calibrate');

const HELP = `npm run plan -- --calibrate --out FILE.json [--gpu auto|wgpu|dawn] [--adapter NAME] [--quick]
  measures this adapter (dispatch overhead, matmul rate by shape, memory bandwidth, flash attention) and the
  worker data planes (α, β) and writes a device profile for --device FILE.json; --quick measures a few seconds' worth`;

/**
 * Parses the flags, measures, writes the profile; returns the printed text.
 * @throws Error naming an unknown or missing flag, a bad --gpu, or a failed measurement.
 */
export async function calibrateMain(argv: string[]): Promise<string> {
  let parsed;
  try {
    parsed = parseCliArgs({
      args: argv,
      options: {
        calibrate: { type: 'boolean' },
        out: { type: 'string' },
        gpu: { type: 'string', default: 'auto' },
        adapter: { type: 'string' },
        quick: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
      allowPositionals: false,
    });
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]}; --calibrate takes --out, --gpu, --adapter, --quick`);
  }
  const v = parsed.values;
  if (v.help) {
    console.log(HELP);
    return HELP;
  }
  if (!v.out?.endsWith('.json')) throw new Error(`--calibrate needs --out FILE.json, got ${v.out ?? 'none'}`);
  if (!['auto', 'wgpu', 'dawn'].includes(v.gpu)) {
    throw new Error(`--gpu must be one of auto, wgpu, dawn, got '${v.gpu}'`);
  }
  const lines: string[] = [];
  const log = (l: string) => {
    lines.push(l);
    console.log(l);
  };
  const gpu = await Gpu.create({ backend: v.gpu as Backend, adapter: v.adapter, log: () => {} });
  const t0 = performance.now();
  let profile;
  try {
    log(`calibrating ${gpu.adapterDescription} (${v.quick ? 'quick' : 'full'})`);
    profile = await calibrate(gpu, v.quick ? 'quick' : 'full', v.out, log);
  } finally {
    gpu.destroy();
  }
  DeviceProfileSchema.parse(profile); // what --device will read back
  await Deno.writeTextFile(v.out, JSON.stringify(profile, null, 2) + '\n');
  log(`wrote ${v.out} in ${((performance.now() - t0) / 1e3).toFixed(0)} s; price a plan on it with --device ${v.out}`);
  return lines.join('\n');
}
