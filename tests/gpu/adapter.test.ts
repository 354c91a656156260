/**
 * `--adapter NAME|INDEX` (src/gpu/dawn_adapters.ts): Dawn opens the adapter by name substring or
 * by index into the adapters it lists; a name or index that matches none, or a backend that
 * cannot choose, is one error naming what exists. Runs on Dawn whatever GPU= says: choosing an
 * adapter is Dawn's. Dawn devices open in processes of their own (tests/util/open_adapter.ts).
 */
import { deepStrictEqual, equal, match, rejects } from 'node:assert/strict';
import { Gpu } from '../../src/gpu/context.ts';
import { parseDawnAdapterList } from '../../src/gpu/dawn_adapters.ts';
import { runCli, TINY_RUN } from '../util/cli.ts';

Deno.test('Dawn\'s "no adapter" message is parsed into the adapters it found', () => {
  const msg = "no adapter with backend 'vulkan' and name 'x' found\nAvailable adapters:\n" +
    " * backend: 'vulkan', name: 'NVIDIA H200'\n * backend: 'vulkan', name: 'SwiftShader Device (Subzero)'\n";
  deepStrictEqual(parseDawnAdapterList(msg), [
    { backend: 'vulkan', name: 'NVIDIA H200' },
    { backend: 'vulkan', name: 'SwiftShader Device (Subzero)' },
  ]);
  deepStrictEqual(parseDawnAdapterList('something else'), []);
});

/** `backend · description` or `error: …` of a device opened in its own process (tests/util/open_adapter.ts). */
async function open(backend: string, adapter: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ['run', '-A', new URL('../util/open_adapter.ts', import.meta.url).pathname, backend, adapter],
    env: { XDG_RUNTIME_DIR: '/tmp' },
    stdout: 'piped',
    stderr: 'null',
  }).output();
  return new TextDecoder().decode(out.stdout).trim();
}

Deno.test('--adapter: by index and by name on Dawn; no match, an index past the list and wgpu are clear errors', async () => {
  const first = await open('dawn', '0');
  match(first, /^dawn · \S/);
  const none = await open('dawn', 'no-such-gpu');
  match(
    none,
    /^error: --adapter no-such-gpu: no adapter .*'no-such-gpu'.*Available adapters: \* backend: 'vulkan', name: '/,
  );
  // auto with --adapter is Dawn, and a substring of the first listed name finds the same adapter
  // (whichever GPU or software adapter the machine has).
  const [listed] = parseDawnAdapterList(none.replace(/ \* /g, '\n * '));
  equal(await open('auto', listed.name.split(' ')[0]), first);
  match(await open('dawn', '7'), /^error: --adapter 7: Dawn found 1 adapter\(s\) \(0: /);
  // Refused before any device is opened, so in-process.
  await rejects(
    Gpu.create({ backend: 'wgpu', adapter: '0' }),
    /--adapter picks among several GPUs through Dawn: use --gpu=dawn/,
  );
});

Deno.test({
  name: 'train --adapter 0 runs on that adapter; a parallel run refuses the flag',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      const r = await runCli('train.ts', [
        ...TINY_RUN,
        '--steps',
        '1',
        '--adapter',
        '0',
        '--gpu',
        'dawn',
        '--out',
        dir,
      ]);
      equal(r.code, 0, r.stderr);
      match(r.stdout, /^gpu: dawn · /m);
      const p = await runCli('train.ts', ['--dp', '2', '--adapter', '0']);
      equal(p.code, 1);
      match(
        p.stderr,
        /--adapter picks the GPU of a single-rank run or of each MPI process \(--transport mpi\); a parallel run over workers does not take it/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
