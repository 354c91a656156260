/**
 * scripts/setup.sh, which `npm test` runs first: with the system packages present it does
 * nothing; as root (or with passwordless sudo) it installs the missing ones with apt-get;
 * otherwise it stops at once with one `error:` line giving the command to run. dpkg, id,
 * sudo and apt-get are stand-ins on PATH that record their calls, so nothing is installed.
 */
import { deepStrictEqual, equal, match } from 'node:assert/strict';

const script = new URL('../../scripts/setup.sh', import.meta.url).pathname;

interface Fake {
  /** Packages dpkg reports as not installed. */
  missing: string[];
  uid: number;
  /** Whether `sudo -n true` succeeds. */
  sudo: boolean;
  env?: Record<string, string>;
}

async function runSetup(f: Fake) {
  const dir = await Deno.makeTempDir({ prefix: 'setup-test-' });
  try {
    const log = `${dir}/calls.log`;
    const tool = async (name: string, body: string) => {
      await Deno.writeTextFile(`${dir}/${name}`, `#!/usr/bin/env bash\n${body}\n`);
      await Deno.chmod(`${dir}/${name}`, 0o755);
    };
    await tool('dpkg', `for p in ${f.missing.join(' ')}; do [[ "$2" == "$p" ]] && exit 1; done; exit 0`);
    await tool('id', `echo ${f.uid}`);
    await tool('sudo', f.sudo ? `echo "sudo $*" >> ${log}; [[ "$1" == -n ]] && shift; "$@"` : 'exit 1');
    await tool('apt-get', `echo "apt-get $*" >> ${log}`);
    const out = await new Deno.Command('bash', {
      args: [script],
      env: { PATH: `${dir}:${Deno.env.get('PATH')}`, ...f.env },
      stdout: 'piped',
      stderr: 'piped',
    }).output();
    const calls = (await Deno.readTextFile(log).catch(() => '')).trim().split('\n').filter(Boolean);
    return { code: out.code, stderr: new TextDecoder().decode(out.stderr), calls };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test('setup.sh: nothing to do when the packages are installed', async () => {
  const r = await runSetup({ missing: [], uid: 1000, sudo: false });
  equal(r.code, 0, r.stderr);
  deepStrictEqual(r.calls, []);
});

Deno.test('setup.sh: as root it installs exactly the missing packages with apt-get', async () => {
  const r = await runSetup({ missing: ['chromium'], uid: 0, sudo: false });
  equal(r.code, 0, r.stderr);
  deepStrictEqual(r.calls, ['apt-get update -qq', 'apt-get install -y -qq chromium']);
});

Deno.test('setup.sh: a user with passwordless sudo installs through sudo', async () => {
  const r = await runSetup({ missing: ['mesa-vulkan-drivers', 'chromium'], uid: 1000, sudo: true });
  equal(r.code, 0, r.stderr);
  deepStrictEqual(r.calls.filter((c) => c.startsWith('apt-get')), [
    'apt-get update -qq',
    'apt-get install -y -qq mesa-vulkan-drivers chromium',
  ]);
});

Deno.test('setup.sh: without root or sudo it stops at once with the command to run', async () => {
  const r = await runSetup({ missing: ['mesa-vulkan-drivers'], uid: 1000, sudo: false });
  equal(r.code, 1);
  deepStrictEqual(r.calls, []);
  const lines = r.stderr.trim().split('\n');
  equal(lines.length, 1, r.stderr);
  match(lines[0], /^error: .*run: sudo apt-get install -y mesa-vulkan-drivers$/);
});

Deno.test('setup.sh: CHROMIUM naming another browser drops the chromium package', async () => {
  const r = await runSetup({ missing: ['chromium'], uid: 0, sudo: false, env: { CHROMIUM: '/opt/chrome' } });
  equal(r.code, 0, r.stderr);
  deepStrictEqual(r.calls, []);
});
