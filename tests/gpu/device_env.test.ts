/**
 * SwiftShader added for Dawn must not leak into child processes: their wgpu would pick it and a
 * tiny run grows past 8 GB. A child that inherits the variable from another pid drops it when
 * src/gpu/device.ts loads; the adding process itself (and its workers, same pid) keeps it.
 */
import { equal } from 'node:assert/strict';

const device = new URL('../../src/gpu/device.ts', import.meta.url).href;
const ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

async function childSees(env: Record<string, string>, setPidToSelf = false): Promise<string> {
  const code = `${setPidToSelf ? `Deno.env.set('WEBGPU_SANDBOX_SWIFTSHADER_PID', String(Deno.pid));` : ''}
    await import(${JSON.stringify(device)});
    console.log(Deno.env.get('VK_ADD_DRIVER_FILES') ?? '(unset)');`;
  const out = await new Deno.Command(Deno.execPath(), { args: ['eval', code], env, stdout: 'piped', stderr: 'piped' })
    .output();
  equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout).trim();
}

Deno.test('device.ts drops a SwiftShader ICD that another process added for its Dawn', async () => {
  equal(await childSees({ VK_ADD_DRIVER_FILES: ICD, WEBGPU_SANDBOX_SWIFTSHADER_PID: '1' }), '(unset)');
});

Deno.test("device.ts keeps the user's own VK_ADD_DRIVER_FILES and its own process's", async () => {
  equal(await childSees({ VK_ADD_DRIVER_FILES: '/opt/my_icd.json' }), '/opt/my_icd.json');
  // Even when a marker came along from a parent that had added SwiftShader for its own Dawn.
  equal(
    await childSees({ VK_ADD_DRIVER_FILES: '/opt/my_icd.json', WEBGPU_SANDBOX_SWIFTSHADER_PID: '1' }),
    '/opt/my_icd.json',
  );
  equal(await childSees({ VK_ADD_DRIVER_FILES: ICD }, true), ICD);
});
