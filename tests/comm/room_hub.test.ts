/**
 * The room server's state machine (src/comm/room/room_hub.ts) without sockets: ranks on join,
 * membership on leave, relays to the addressed rank, the config held for joiners, and every
 * refusal answered to its sender alone.
 */
import { deepEqual, equal, match, ok } from 'node:assert/strict';
import { type Outcome, POLICY_VIOLATION, RoomHub } from '../../src/comm/room/room_hub.ts';
import { DEFAULT_LIMITS, type RoomLimits, TokenBucket } from '../../src/comm/room/limits.ts';
import { parseClientMessage } from '../../src/comm/room/messages.ts';

/** A hub with connections 0…n-1 open, and a per-connection seq counter. */
function setup(n: number, code?: string, limits: Partial<RoomLimits> = {}) {
  const hub = new RoomHub(code, { ...DEFAULT_LIMITS, ...limits });
  const seqs = new Map<number, number>();
  for (let id = 0; id < n; id++) ok(hub.open(id, 0));
  const send = (id: number, m: Record<string, unknown>, now = 0): Outcome => {
    const seq = seqs.get(id) ?? 0;
    seqs.set(id, seq + 1);
    return hub.receive(id, JSON.stringify({ seq, ...m }), now);
  };
  return { hub, send };
}

/** The one error `out` sends, after checking it goes to `id` alone. */
function refusal(out: Outcome, id: number): string {
  equal(out.send.length, 1, JSON.stringify(out));
  equal(out.send[0].to, id);
  const m = out.send[0].message;
  ok(m.type === 'error', JSON.stringify(m));
  return m.message;
}

const relay = (type: string, from: number, to: number, extra: Record<string, unknown> = { sdp: 'v=0' }) => ({
  type,
  room: 'a',
  from,
  to,
  ...extra,
});

Deno.test('room: joins get ranks 0, 1, 2; each join is broadcast; the first join sets the config joiners read', () => {
  const { send } = setup(3);
  const config = { nLayer: 2, steps: 50 }, plan = { dp: 3 };
  const w0 = send(0, { type: 'join', room: 'a', config, plan });
  deepEqual(w0.send, [{
    to: 0,
    message: { type: 'welcome', rank: 0, config, plan, room: 'a', members: [0], host: 0, epoch: 1 },
  }]);
  send(1, { type: 'join', room: 'a', config: { nLayer: 9 } });
  const w2 = send(2, { type: 'join', room: 'a' });
  equal(w2.send[0].to, 2);
  deepEqual(w2.send[0].message, {
    type: 'welcome',
    rank: 2,
    config,
    plan,
    room: 'a',
    members: [0, 1, 2],
    host: 0,
    epoch: 3,
  });
  deepEqual(w2.send.slice(1).map((d) => d.to), [0, 1]);
  for (const d of w2.send.slice(1)) {
    deepEqual(d.message, { type: 'members', room: 'a', members: [0, 1, 2], host: 0, epoch: 3 });
  }
});

Deno.test('room: a leave updates the others; the freed rank is reused; the host passes to the smallest rank', () => {
  const { hub, send } = setup(4);
  for (let id = 0; id < 3; id++) send(id, { type: 'join', room: 'a' });
  const gone = hub.close(1);
  deepEqual(gone.send.map((d) => d.to), [0, 2]);
  deepEqual(gone.send[0].message, { type: 'members', room: 'a', members: [0, 2], host: 0, epoch: 4 });
  equal(hub.close(1).send.length, 0, 'closing twice sends nothing');
  const w = send(3, { type: 'join', room: 'a' });
  equal(w.send[0].message.type === 'welcome' && w.send[0].message.rank, 1);
  const hostLeft = send(0, { type: 'leave' });
  deepEqual(hub.membership('a'), { room: 'a', members: [1, 2], host: 1, epoch: 6 });
  deepEqual(hostLeft.send.map((d) => d.to).sort(), [2, 3]);
  hub.close(2);
  hub.close(3);
  equal(hub.membership('a'), null, 'an empty room is dropped');
  equal(hub.roomCount, 0);
});

Deno.test('room: offers, answers and ICE candidates reach the addressed rank only, without the seq', () => {
  const { send } = setup(3);
  for (let id = 0; id < 3; id++) send(id, { type: 'join', room: 'a' });
  deepEqual(send(0, relay('offer', 0, 2)).send, [{
    to: 2,
    message: { type: 'offer', room: 'a', from: 0, to: 2, sdp: 'v=0' },
  }]);
  deepEqual(send(2, relay('answer', 2, 0)).send.map((d) => d.to), [0]);
  const cand = { candidate: 'candidate:1 1 udp 1 127.0.0.1 5000 typ host', sdpMid: '0', sdpMLineIndex: 0 };
  deepEqual(send(1, relay('ice', 1, 0, { candidate: cand })).send, [{
    to: 0,
    message: { type: 'ice', room: 'a', from: 1, to: 0, candidate: cand },
  }]);
  deepEqual(send(1, relay('ice', 1, 2, { candidate: null })).send.map((d) => d.to), [2]);
});

Deno.test('room: the host alone sets the config; the others get it, and so does a later joiner', () => {
  const { send } = setup(3);
  send(0, { type: 'join', room: 'a' });
  send(1, { type: 'join', room: 'a' });
  const config = { lr: 0.001 }, plan = { dp: 2, sync: 'diloco' };
  deepEqual(send(0, { type: 'config', room: 'a', config, plan }).send, [{
    to: 1,
    message: { type: 'config', room: 'a', config, plan },
  }]);
  match(refusal(send(1, { type: 'config', room: 'a', config: {}, plan: {} }), 1), /only the host \(rank 0\)/);
  const w = send(2, { type: 'join', room: 'a' }).send[0].message;
  ok(w.type === 'welcome');
  deepEqual([w.config, w.plan], [config, plan]);
});

Deno.test('room: hostile messages are refused to their sender alone, naming what was wrong', () => {
  const { hub, send } = setup(4, 'sesame');
  send(0, { type: 'join', room: 'a', code: 'sesame' });
  send(1, { type: 'join', room: 'a', code: 'sesame' });
  send(3, { type: 'join', room: 'b', code: 'sesame' });
  match(refusal(hub.receive(0, '{"type": "offer",', 0), 0), /^malformed JSON: .*send one JSON object/);
  match(refusal(hub.receive(0, '[1]', 0), 0), /a JSON object with a "type", got an array/);
  match(refusal(hub.receive(0, new Uint8Array(8), 0), 0), /binary frames are refused/);
  // Oversized is decided before parsing: this one is not JSON at all.
  match(refusal(hub.receive(0, 'x'.repeat(DEFAULT_LIMITS.maxBytes + 1), 0), 0), /over 65536 bytes refused/);
  match(refusal(hub.receive(0, `"${'é'.repeat(DEFAULT_LIMITS.maxBytes / 2)}"`, 0), 0), /over 65536 bytes/);
  match(
    refusal(send(0, { type: 'tensor', data: [1, 2] }), 0),
    /unknown message type "tensor"; allowed: join, leave, config, offer, answer, ice/,
  );
  match(refusal(send(0, relay('offer', 0, 1, { sdp: 7 })), 0), /'offer' message: sdp: /);
  match(refusal(send(0, { ...relay('offer', 0, 1), extra: 1 }), 0), /'offer' message: .*extra/i);
  match(refusal(send(0, { ...relay('offer', 0, 1), room: 'b' }), 0), /wrong room 'b': this connection is in room 'a'/);
  match(refusal(send(0, relay('offer', 1, 0)), 0), /'from' 1 is not your rank 0/);
  match(refusal(send(0, relay('offer', 0, 0)), 0), /'to' is your own rank 0/);
  match(refusal(send(0, relay('offer', 0, 5)), 0), /rank 5 is not in room 'a' \(members 0, 1\)/);
  match(refusal(send(2, relay('offer', 0, 1)), 2), /join a room before signalling/);
  match(refusal(send(2, { type: 'join', room: 'a' }), 2), /requires a join code/);
  match(refusal(send(2, { type: 'join', room: 'a', code: 'open' }), 2), /wrong join code/);
  match(refusal(send(0, { type: 'join', room: 'c', code: 'sesame' }), 0), /already in room 'a' as rank 0/);
  match(refusal(send(2, { type: 'join', room: '../x', code: 'sesame' }), 2), /room: a room name is 1 to 64/);
  // Replays: the same seq again, and an older one.
  const raw = JSON.stringify({ seq: 1000, ...relay('offer', 0, 1) });
  equal(hub.receive(0, raw, 0).send[0].to, 1);
  match(refusal(hub.receive(0, raw, 0), 0), /replayed or out-of-order seq 1000: each message's seq must exceed 1000/);
  match(refusal(hub.receive(0, raw.replace('1000', '999'), 0), 0), /seq 999/);
  // Nothing above changed a membership.
  deepEqual(hub.membership('a')?.members, [0, 1]);
  deepEqual(hub.membership('b')?.members, [0]);
});

Deno.test('room: the caps on members per room, rooms per server and connections waiting to join', () => {
  const { hub, send } = setup(4, undefined, { maxMembers: 2, maxRooms: 2, maxPending: 4, joinTimeoutMs: 1000 });
  equal(hub.open(99, 0), false, 'a fifth connection waiting to join is turned away');
  send(0, { type: 'join', room: 'a' });
  send(1, { type: 'join', room: 'a' });
  match(refusal(send(2, { type: 'join', room: 'a' }), 2), /room 'a' is full \(2 members\)/);
  send(2, { type: 'join', room: 'b' });
  match(refusal(send(3, { type: 'join', room: 'c' }), 3), /maximum of 2 rooms/);
  equal(hub.pending, 1);
  ok(hub.open(4, 500));
  deepEqual(hub.expired(1200), [3], 'only the connection waiting since 0 without joining has expired');
});

Deno.test('room: a flood is rate-limited, and a connection refused too often is closed and leaves its room', () => {
  const b = new TokenBucket(3, 2, 0);
  deepEqual([b.take(0), b.take(0), b.take(0), b.take(0)], [true, true, true, false]);
  deepEqual([b.take(400), b.take(500), b.take(500)], [false, true, false], '2 per second refill one token in 500 ms');
  const { hub, send } = setup(2, undefined, { burst: 10, ratePerSecond: 1, maxStrikes: 5 });
  send(0, { type: 'join', room: 'a' });
  send(1, { type: 'join', room: 'a' });
  for (let i = 0; i < 9; i++) equal(send(1, relay('offer', 1, 0)).send[0].to, 0); // 10 tokens: its join + 9 offers
  match(refusal(send(1, relay('offer', 1, 0)), 1), /rate limit: over 10 messages at once or 1 per second/);
  equal(send(1, relay('offer', 1, 0), 1000).send[0].to, 0, 'a second later one token is back');
  // Absent ranks are refused without a strike; four more refusals reach the limit of five.
  for (let i = 0; i < 10; i++) refusal(send(0, relay('offer', 0, 7), 2000 + i * 1000), 0);
  for (let i = 0; i < 3; i++) refusal(hub.receive(1, 'not json', 10_000 + i * 1000), 1);
  const last = hub.receive(1, 'not json', 20_000);
  deepEqual(last.close, { code: POLICY_VIOLATION, reason: '5 messages refused' });
  deepEqual(last.send.map((d) => [d.to, d.message.type]), [[1, 'error'], [1, 'error'], [0, 'members']]);
  deepEqual(last.send[1].message, { type: 'error', message: 'closing this connection: 5 messages refused, the limit' });
  deepEqual(hub.membership('a')?.members, [0]);
  equal(hub.receive(1, JSON.stringify({ seq: 99, type: 'join', room: 'a' }), 30_000).send.length, 0);
});

Deno.test('room messages: every field is checked; a refusal names the field and carries the seq when there is one', () => {
  const ok1 = parseClientMessage(JSON.stringify({ type: 'leave', seq: 3 }));
  deepEqual(ok1, { ok: true, message: { type: 'leave', seq: 3 } });
  const bad = parseClientMessage(JSON.stringify({ type: 'join', seq: 4, room: 'a', code: 5 }));
  deepEqual(bad.ok, false);
  ok(!bad.ok && bad.seq === 4 && /'join' message: code: /.test(bad.error), JSON.stringify(bad));
  const neg = parseClientMessage(JSON.stringify({ type: 'leave', seq: -1 }));
  ok(!neg.ok && /seq: /.test(neg.error), JSON.stringify(neg));
});
