/**
 * `npm run train -- --arch <name>` on the default preset, as docs/training.md's architecture list
 * invites: every architecture trains (one step, its loss finite) on the preset's shape, where
 * an architecture that needs more than the schema's defaults takes its own (recurrent depth:
 * prelude + one core block + coda), and a value the user gives is never replaced — an explicit
 * shape that cannot run is still one error line naming the flag.
 */
import { equal, match, ok } from 'node:assert/strict';
import { ARCH_NAMES } from '../../src/models/archs.ts';
import { readLosses, runCli } from '../util/cli.ts';

/** Only the run's length, evaluation and sample are cut (the shape is the preset's): cheap on 2 cores. */
const SHORT = ['--steps', '1', '--eval-batches', '1', '--sample-tokens', '0'];

Deno.test({
  name: 'train --arch: every architecture trains a step on the default preset; an explicit bad shape is refused',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'arch-preset-' });
    try {
      for (const arch of ARCH_NAMES) {
        const r = await runCli('train.ts', ['--arch', arch, ...SHORT, '--out', `${dir}/${arch}`]);
        equal(r.code, 0, `--arch ${arch}: ${r.stderr}`);
        const cfg = JSON.parse(await Deno.readTextFile(`${dir}/${arch}/config.json`));
        equal(cfg.arch, arch);
        // The preset's shape, except the core block recurrent depth cannot run without.
        equal(cfg.nLayer, arch === 'recurrent-depth' ? cfg.preludeLayers + 1 + cfg.codaLayers : 2, arch);
        equal(cfg.nEmbd, 64);
        const loss = (await readLosses(`${dir}/${arch}/metrics.jsonl`)).get(0);
        ok(loss !== undefined && Number.isFinite(loss), `--arch ${arch}: step 0 loss ${loss}`);
      }
      const bad = await runCli('train.ts', [
        '--arch',
        'recurrent-depth',
        '--n-layer',
        '2',
        ...SHORT,
        '--out',
        `${dir}/bad`,
      ]);
      equal(bad.code, 1, bad.stderr);
      match(
        bad.stderr.trim(),
        /^error: Invalid config: --arch recurrent-depth needs at least one core block: .*give --n-layer 3 or more/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
