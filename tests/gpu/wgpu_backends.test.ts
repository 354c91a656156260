/**
 * Deno's wgpu on Linux opens Vulkan only (src/gpu/device.ts vulkanOnlyOnLinux): with OpenGL
 * allowed it also loads libEGL, whose exit-time destructors raced ending threads and aborted
 * finished runs (docs/design.md#runtime-quirks). Each case opens a device in a fresh process
 * and reads which libraries that process mapped.
 */
import { equal, ok } from 'node:assert/strict';

const device = new URL('../../src/gpu/device.ts', import.meta.url).href;

/** Opens a wgpu device in a new Deno process with `env`; returns the backend variable after it and whether libEGL is mapped. */
async function probe(env: Record<string, string>): Promise<{ backends: string; egl: boolean; out: string }> {
  const code = `import { openDevice, WGPU_BACKENDS_ENV } from '${device}';
const d = await openDevice({ backend: 'wgpu' });
const maps = Deno.readTextFileSync('/proc/self/maps');
console.log(JSON.stringify({ backends: Deno.env.get(WGPU_BACKENDS_ENV), egl: /libEGL/.test(maps) }));
d.close();`;
  const r = await new Deno.Command(Deno.execPath(), {
    args: ['eval', '--unstable-webgpu', code],
    env: { XDG_RUNTIME_DIR: '/tmp', ...env },
    stdout: 'piped',
    stderr: 'piped',
  }).output();
  const out = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
  equal(r.code, 0, out);
  const line = out.split('\n').find((l) => l.startsWith('{'));
  ok(line, out);
  return { ...JSON.parse(line), out };
}

Deno.test({
  name: 'wgpu on Linux: Vulkan only unless the user chose backends, so libEGL is never loaded',
  ignore: Deno.build.os !== 'linux',
  fn: async () => {
    const plain = await probe({});
    equal(plain.backends, 'vulkan', plain.out);
    equal(plain.egl, false, `libEGL mapped:\n${plain.out}`);
    // The user's choice stands; allowing OpenGL loads libEGL again (the check above can fail).
    const chosen = await probe({ DENO_WEBGPU_BACKEND: 'vulkan,gl' });
    equal(chosen.backends, 'vulkan,gl', chosen.out);
    equal(chosen.egl, true, `libEGL not mapped with OpenGL allowed:\n${chosen.out}`);
  },
});
