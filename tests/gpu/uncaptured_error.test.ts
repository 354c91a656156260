/**
 * An uncaptured WebGPU error (here a submit of a destroyed buffer, the validation error a
 * use-after-destroy gives) fails the test that caused it: tests/util/gpu.ts drains the queue after
 * each test and fails it on any error the devices reported (Gpu.onUncapturedError). Run in a
 * `deno test` of its own on tests/gpu/uncaptured_fixture.ts, on the suite's backend.
 */
import { match, notEqual } from 'node:assert/strict';

Deno.test("an uncaptured WebGPU error after a test's last read fails that test, not the next one", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ['test', '-A', '--no-check', 'tests/gpu/uncaptured_fixture.ts'],
    env: { NO_COLOR: '1' },
    stdout: 'piped',
    stderr: 'piped',
  }).output();
  const plain = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  notEqual(out.code, 0, plain);
  match(plain, /submits a destroyed buffer after its last read \.\.\. FAILED/, plain);
  match(plain, /reads after it \.\.\. ok/, plain);
  match(plain, /uncaptured WebGPU error\(s\) during this test:\n.*destroyed on purpose/, plain);
  match(plain, /FAILED \| 1 passed \| 1 failed/, plain);
});
