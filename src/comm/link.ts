/**
 * The wire side of a Communicator call: per-(transport, group) sequence numbers, the headers of
 * point-to-point messages, and the {@link Link} an algorithm talks through (algorithms.ts), which
 * stamps every message with the call's header (group, seq, op, detail, dtype, count, tag) so
 * peers can check they agree.
 */
import type { DType, Expect, Transport } from './transport.ts';
import type { Link, NumArray } from './algorithms.ts';

/** Sequence counters per transport and group id, shared by every communicator over that group. */
const seqs = new WeakMap<Transport, Map<string, number>>();

/** Takes the next sequence number of `key` on transport `t`. */
export function nextSeq(t: Transport, key: string): number {
  let m = seqs.get(t);
  if (!m) seqs.set(t, m = new Map());
  const s = m.get(key) ?? 0;
  m.set(key, s + 1);
  return s;
}

/** The sequence number the next call on `key` will take. */
export function peekSeq(t: Transport, key: string): number {
  return seqs.get(t)?.get(key) ?? 0;
}

/** Wire dtype of a typed array. @throws TypeError for other arrays. */
export function dtypeOf(x: NumArray): DType {
  if (x instanceof Float32Array) return 'f32';
  if (x instanceof Int32Array) return 'i32';
  throw new TypeError('collectives take Float32Array or Int32Array');
}

/**
 * The header of a point-to-point message of group `group` from world rank `from` to world rank
 * `to`, holding `x` with user tag `tag`: takes the pair's next sequence number, so sends and
 * receives are matched in order per (group, src, dst).
 */
export function p2pExpect(t: Transport, group: string, from: number, to: number, x: NumArray, tag = 0): Expect {
  const seq = nextSeq(t, `${group}:p2p:${from}>${to}`);
  return { group: `${group}:p2p`, seq, op: 'send', detail: '', dtype: dtypeOf(x), count: x.length, tag };
}

/** A zeroed array of `like`'s type and `n` elements. */
export function alloc<T extends NumArray>(like: T, n: number): T {
  return (like instanceof Float32Array ? new Float32Array(n) : new Int32Array(n)) as T;
}

/**
 * One collective call's {@link Link} over group `group` (world ranks `ranks`, this rank's group
 * rank `rank`): takes the group's next sequence number; tags count messages per peer, so
 * several messages between one pair in one call are matched in order.
 */
export function callLink(
  t: Transport,
  ranks: readonly number[],
  rank: number,
  group: string,
  op: string,
  detail: string,
  x: NumArray,
  timeoutMs?: number,
): Link {
  const dtype = dtypeOf(x);
  const base = { group, seq: nextSeq(t, group), op, detail, dtype, count: x.length };
  const sent = new Map<number, number>(), got = new Map<number, number>();
  const bump = (m: Map<number, number>, k: number) => {
    const v = m.get(k) ?? 0;
    m.set(k, v + 1);
    return v;
  };
  const wrap = (b: ArrayBuffer): NumArray => dtype === 'f32' ? new Float32Array(b) : new Int32Array(b);
  const link: Link = {
    p: ranks.length,
    r: rank,
    send: (peer, data) => t.send(ranks[peer], { ...base, tag: bump(sent, peer) }, data),
    recv: async (peer) => wrap(await t.recv(ranks[peer], { ...base, tag: bump(got, peer) }, timeoutMs)),
    recvInto: (peer, use) =>
      t.recvWith(ranks[peer], { ...base, tag: bump(got, peer) }, (b) => {
        if (b.byteOffset % 4) b = b.slice(); // a typed-array view needs 4-byte alignment
        use(
          dtype === 'f32'
            ? new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4)
            : new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4),
        );
      }, timeoutMs),
    recvAll: async (peers) => {
      // One tag per peer; group peers expecting the same tag into one deadline.
      const tags = peers.map((q) => bump(got, q));
      if (tags.every((tg) => tg === tags[0])) {
        return (await t.recvMany(peers.map((q) => ranks[q]), { ...base, tag: tags[0] ?? 0 }, timeoutMs)).map(wrap);
      }
      return Promise.all(peers.map((q, i) => t.recv(ranks[q], { ...base, tag: tags[i] }, timeoutMs).then(wrap)));
    },
  };
  return link;
}
