/**
 * `npm run room` as a process on `--port 0` (src/cli/room.ts): the built demo served with the
 * isolation headers and nothing outside it, and the hardening of docs/demo.md#a-classroom-room —
 * malformed, oversized, replayed, wrong-room, rank-spoofing and binary messages and a flood of
 * 10 000 joins are refused, the server stays up, and two members relaying to each other during and
 * after the flood see every message, in order.
 */
import { deepEqual, equal, match, ok, throws } from 'node:assert/strict';
import { spawnUntil } from '../util/spawn_until.ts';
import { type Msg, RoomClient } from '../util/room_client.ts';
import { DEFAULT_ROOM_PORT, parseRoomArgs } from '../../src/cli/room.ts';

const CODE = 'sesame';

/** A built demo in miniature, with a secret beside it and a symlink pointing out at the secret. */
async function fixture(): Promise<{ top: string; dist: string }> {
  const top = await Deno.makeTempDir({ prefix: 'room-' });
  const dist = `${top}/dist`;
  await Deno.mkdir(`${dist}/assets`, { recursive: true });
  await Deno.writeTextFile(`${dist}/index.html`, '<!doctype html><title>room fixture</title>');
  await Deno.writeTextFile(`${dist}/assets/app.js`, 'export const x = 1;');
  await Deno.writeTextFile(`${top}/secret.txt`, 'SECRET');
  await Deno.symlink(`${top}/secret.txt`, `${dist}/link.txt`);
  return { top, dist };
}

/** One raw HTTP/1.1 GET of `target` as written (fetch would normalise `..` away): status line and body. */
async function rawGet(port: number, target: string, headers = 'Connection: close\r\n'): Promise<string> {
  const conn = await Deno.connect({ hostname: '127.0.0.1', port });
  await conn.write(new TextEncoder().encode(`GET ${target} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`));
  let text = '';
  for await (const chunk of conn.readable) text += new TextDecoder().decode(chunk);
  return text;
}

/** `p`, or an error naming `what` after 20 s (a test never hangs on a line that is not printed). */
async function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within 20 s`)), 20_000);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** `rounds` offers from `a` (rank 0) to `b` (rank 1), each answered; checks every one arrives intact and in order. */
async function pingPong(a: RoomClient, b: RoomClient, tag: string, rounds: number): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    a.send({ type: 'offer', room: 'class', from: 0, to: 1, sdp: `${tag}-${i}` });
    const offer = await b.take((m) => m.type === 'offer', `offer ${tag}-${i}`);
    deepEqual(offer, { type: 'offer', room: 'class', from: 0, to: 1, sdp: `${tag}-${i}` });
    b.send({ type: 'answer', room: 'class', from: 1, to: 0, sdp: `${tag}-${i}-ok` });
    equal((await a.take((m) => m.type === 'answer', `answer ${tag}-${i}`)).sdp, `${tag}-${i}-ok`);
  }
}

Deno.test({
  name: 'npm run room: serves the demo isolated, refuses hostile messages and a 10 000-join flood, keeps relaying',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async (t) => {
    const { top, dist } = await fixture();
    const server = spawnUntil('room.ts', ['--port', '0', '--dist', dist, '--code', CODE]);
    try {
      await within(server.waitFor(/members connect to/), 'the listening lines');
      const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)\/ \(port \1\)/.exec(server.output().stdout)?.[1]);
      ok(port > 0, server.output().stdout);
      const base = `http://127.0.0.1:${port}`, ws = `ws://127.0.0.1:${port}/room`;
      let exited = false;
      server.child.status.then(() => (exited = true));

      await t.step('serves the built demo with COOP/COEP, and nothing outside it', async () => {
        const index = await fetch(`${base}/`);
        equal(index.status, 200);
        match(await index.text(), /<title>room fixture<\/title>/);
        equal(index.headers.get('cross-origin-opener-policy'), 'same-origin');
        equal(index.headers.get('cross-origin-embedder-policy'), 'require-corp');
        const js = await fetch(`${base}/assets/app.js`);
        equal(js.headers.get('content-type'), 'text/javascript; charset=utf-8');
        equal(await js.text(), 'export const x = 1;');
        const missing = await fetch(`${base}/nothing.js`);
        equal(missing.status, 404);
        equal(missing.headers.get('cross-origin-embedder-policy'), 'require-corp');
        await missing.body?.cancel();
        const plain = await fetch(`${base}/room`);
        equal(plain.status, 426);
        await plain.body?.cancel();
        // An upgrade without its key is refused, and holds no slot among those waiting to join.
        for (let i = 0; i < 70; i++) {
          match(await rawGet(port, '/room', 'Connection: Upgrade, close\r\nUpgrade: websocket\r\n'), /^HTTP\/1\.1 400/);
        }
        // The URL parser removes dot segments, `%2e%2e` too: these reach the folder as /secret.txt and are not found.
        for (
          const target of ['/../secret.txt', '/../../../etc/passwd', '/assets/../../secret.txt', '/%2e%2e/secret.txt']
        ) {
          const r = await rawGet(port, target);
          ok(!r.includes('SECRET') && !r.includes('root:'), `${target} leaked:\n${r}`);
          match(r, /^HTTP\/1\.1 (400|403|404)/, target);
        }
        for (const target of ['/assets/..%2f..%2fsecret.txt', '/link.txt', '/a%5c..%5csecret.txt']) {
          const r = await rawGet(port, target);
          match(r, /^HTTP\/1\.1 403/, `${target}:\n${r}`);
          ok(!r.includes('SECRET'), target);
        }
      });

      const a = await RoomClient.open(ws), b = await RoomClient.open(ws);
      const config = { nLayer: 2, steps: 100 }, plan = { dp: 2, sync: 'diloco' };
      await t.step("two members join: ranks 0 and 1, the first one's config served to the second", async () => {
        a.send({ type: 'join', room: 'class', code: CODE, config, plan });
        equal((await a.take((m) => m.type === 'welcome', 'welcome')).rank, 0);
        b.send({ type: 'join', room: 'class', code: CODE });
        const w = await b.take((m) => m.type === 'welcome', 'welcome');
        deepEqual([w.rank, w.members, w.config, w.plan], [1, [0, 1], config, plan]);
        deepEqual((await a.take((m) => m.type === 'members', 'members')).members, [0, 1]);
        await pingPong(a, b, 'before', 3);
      });

      await t.step(
        'malformed, oversized, binary, unknown, replayed, wrong-room and spoofing messages are refused',
        async () => {
          const m = await RoomClient.open(ws);
          m.send({ type: 'join', room: 'class', code: CODE });
          equal((await m.take((x) => x.type === 'welcome', 'welcome')).rank, 2);
          m.ws.send('{"type": "offer", "seq": ');
          match(await m.error(), /^malformed JSON/);
          m.ws.send(JSON.stringify({ seq: 10, type: 'offer', room: 'class', from: 2, to: 0, sdp: 'x'.repeat(70_000) }));
          match(await m.error(), /over 65536 bytes refused/);
          m.ws.send(new Uint8Array(1024));
          match(await m.error(), /binary frames are refused/);
          m.send({ type: 'tensor', room: 'class', data: [1, 2, 3] });
          match(await m.error(), /unknown message type "tensor"/);
          m.send({ type: 'offer', room: 'class', from: 0, to: 1, sdp: 'spoofed' });
          match(await m.error(), /'from' 0 is not your rank 2/);
          m.send({ type: 'offer', room: 'other', from: 2, to: 1, sdp: 'elsewhere' });
          match(await m.error(), /wrong room 'other'/);
          const replay = JSON.stringify({ seq: 1000, type: 'ice', room: 'class', from: 2, to: 1, candidate: null });
          m.ws.send(replay);
          m.ws.send(replay);
          match(await m.error(), /replayed or out-of-order seq 1000/);
          equal((await b.take((x) => x.type === 'ice', 'the first of the replayed pair')).from, 2);
          await m.close();
          deepEqual((await a.take((x) => x.type === 'members' && x.members.length === 2, 'members')).members, [0, 1]);
        },
      );

      await t.step('a flood of 10 000 joins is refused while ranks 0 and 1 keep relaying', async () => {
        const attackers = await Promise.all(Array.from({ length: 20 }, () => RoomClient.open(ws)));
        const relaying = pingPong(a, b, 'during', 20);
        attackers.forEach((x, i) => {
          for (let k = 0; k < 500; k++) {
            x.send({ type: 'join', room: k % 2 ? 'class' : `spam-${i}-${k}`, ...(k % 3 ? { code: 'guess' } : {}) });
          }
        });
        // Every attacker is closed: the server says so (its client sees code 1008, or 1006 when the
        // close frame is lost among the frames it is still sending).
        await Promise.all(attackers.map((x) => x.closed));
        await relaying;
        await within(server.waitFor(/(room: closed connection \d+: 50 messages refused\n[^]*){20}/), 'the 20 closings');
        // Each read at most its 50 refusals and the notice, never a welcome (fewer when its own flood
        // made the close a reset, which drops what it had not read yet).
        for (const x of attackers) {
          ok(x.inbox.length <= 51, `${x.inbox.length} replies`);
          for (const r of x.inbox) match(r.message, /join code|closing this connection/, JSON.stringify(r));
        }
        await pingPong(a, b, 'after', 5);
        equal((await fetch(`${base}/`)).status, 200);
        ok(!exited, 'the server is still running');
        for (const c of [a, b]) {
          ok(c.inbox.every((r: Msg) => r.type === 'members' || r.type === 'ice'), JSON.stringify(c.inbox));
        }
        const late = await RoomClient.open(ws);
        late.send({ type: 'join', room: 'class', code: CODE });
        const w = await late.take((x) => x.type === 'welcome', 'welcome after the flood');
        deepEqual([w.rank, w.members, w.config], [2, [0, 1, 2], config]);
        await late.close();
      });
      await a.close();
      await b.close();
    } finally {
      server.child.kill('SIGTERM');
      const done = await server.done();
      await Deno.remove(top, { recursive: true });
      equal(done.code, 0, done.stderr);
      match(done.stdout, /room: stopped/);
    }
  },
});

/**
 * A certificate for 127.0.0.1 and localhost signed by a throw-away CA (openssl, which Debian's base system has), in
 * `dir`: the server's `cert`/`key`, and `ca`, which the test's client trusts.
 */
async function testCertificate(dir: string): Promise<{ cert: string; key: string; ca: string }> {
  const ca = `${dir}/ca.pem`, caKey = `${dir}/ca.key`, cert = `${dir}/cert.pem`, key = `${dir}/key.pem`;
  const ext = `${dir}/leaf.ext`,
    csr = `${dir}/leaf.csr`,
    ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1'];
  await Deno.writeTextFile(ext, 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n');
  const steps = [
    ['req', '-x509', ...ec, '-nodes', '-days', '2', '-subj', '/CN=room test CA', '-keyout', caKey, '-out', ca],
    ['req', ...ec, '-nodes', '-subj', '/CN=localhost', '-keyout', key, '-out', csr],
    [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca,
      '-CAkey',
      caKey,
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      ext,
      '-out',
      cert,
    ],
  ];
  for (const args of steps) {
    const out = await new Deno.Command('openssl', { args, stdout: 'piped', stderr: 'piped' }).output();
    equal(out.code, 0, `openssl ${args[0]}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return { cert, key, ca };
}

Deno.test({
  name: 'npm run room --cert --key: serves HTTPS (a secure context on a LAN address) and says wss://',
  sanitizeResources: false,
  fn: async () => {
    const { top, dist } = await fixture(), { cert, key, ca } = await testCertificate(top);
    const server = spawnUntil('room.ts', ['--port', '0', '--dist', dist, '--cert', cert, '--key', key]);
    try {
      await within(server.waitFor(/members connect to/), 'the listening lines');
      const out = server.output().stdout;
      const port = Number(/listening on https:\/\/127\.0\.0\.1:(\d+)\/ \(port \1\)/.exec(out)?.[1]);
      ok(port > 0, out);
      match(out, new RegExp(`members connect to wss://127\\.0\\.0\\.1:${port}/room`));
      const client = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(ca)] });
      try {
        const index = await fetch(`https://127.0.0.1:${port}/`, { client });
        equal(index.status, 200);
        match(await index.text(), /<title>room fixture<\/title>/);
        equal(index.headers.get('cross-origin-embedder-policy'), 'require-corp');
      } finally {
        client.close();
      }
      // Plain HTTP on the same port is not served.
      await rejectsOrNot200(`http://127.0.0.1:${port}/`);
      const alone = await spawnUntil('room.ts', ['--port', '0', '--dist', dist, '--cert', cert]).done();
      ok(alone.code !== 0, 'a --cert without --key is refused');
      match(alone.stderr, /--cert and --key go together: give both PEM files \(HTTPS\) or neither \(HTTP\)/);
    } finally {
      server.child.kill('SIGTERM');
      const done = await server.done();
      await Deno.remove(top, { recursive: true });
      equal(done.code, 0, done.stderr);
    }
  },
});

/** A plain-HTTP request to a TLS port fails (the connection is refused or reset) or gets no 200. */
async function rejectsOrNot200(url: string): Promise<void> {
  try {
    const r = await fetch(url);
    await r.body?.cancel();
    ok(r.status !== 200, `${url} answered 200 over plain HTTP`);
  } catch (e) {
    ok(e instanceof TypeError, String(e));
  }
}

Deno.test('npm run room flags: defaults, --port 0, and refusals naming the flag and what it takes', () => {
  const d = parseRoomArgs([]);
  deepEqual([d.port, d.host, d.code, d.dist, d.maxRooms, d.maxMembers], [
    DEFAULT_ROOM_PORT,
    '127.0.0.1',
    undefined,
    'dist',
    16,
    64,
  ]);
  const o = parseRoomArgs(['--port', '0', '--host', '0.0.0.0', '--code', 'maple', '--max-members=3']);
  deepEqual([o.port, o.host, o.code, o.maxMembers], [0, '0.0.0.0', 'maple', 3]);
  throws(() => parseRoomArgs(['--port', '65536']), /--port 65536 exceeds the maximum 65535/);
  throws(() => parseRoomArgs(['--port', '-1']), /--port -1 is below the minimum 0/);
  throws(() => parseRoomArgs(['--port', '80.5']), /--port expects an integer/);
  throws(() => parseRoomArgs(['--code', '']), /--code/);
  throws(() => parseRoomArgs(['--tensors']), /Unknown option '--tensors'; npm run room takes: --port, --host, --code/);
  deepEqual([parseRoomArgs(['--cert', 'c.pem', '--key', 'k.pem']).cert, parseRoomArgs(['--key', 'k.pem']).key], [
    'c.pem',
    'k.pem',
  ]);
});
