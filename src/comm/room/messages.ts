/**
 * The room server's wire format (docs/design.md#a-classroom-room): JSON messages, one per WebSocket
 * text frame, validated by zod as a union discriminated on `type`. A room is a rendezvous only:
 * membership, the run's config and plan, and WebRTC signalling between ranks. There is no message
 * that carries tensors, and any other type is refused by name.
 */
import { z } from 'zod';
import { firstIssue } from '../../util/issue_text.ts';

/** Largest message the server reads, in UTF-8 bytes: an SDP offer is a few KiB, a config and plan a few more. */
export const MAX_MESSAGE_BYTES = 64 * 1024;

/** Room names: what a teacher types and students read off the board. */
const RoomName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a room name is 1 to 64 letters, digits, _ or -');
const Rank = z.number().int().min(0).max(1 << 16);
/** Per-connection sequence number: each message's must exceed the previous one's (replays are refused). */
const Seq = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
/** A JSON object, e.g. the run's TrainConfig or ParallelPlan; the room holds it as given and never reads it. */
const JsonObject = z.record(z.string(), z.unknown());

const Join = z.strictObject({
  type: z.literal('join'),
  seq: Seq,
  room: RoomName,
  code: z.string().max(128).optional(),
  /** The run's config and plan: kept when this join creates the room, ignored otherwise. */
  config: JsonObject.optional(),
  plan: JsonObject.optional(),
});
const Leave = z.strictObject({ type: z.literal('leave'), seq: Seq });
const Config = z.strictObject({
  type: z.literal('config'),
  seq: Seq,
  room: RoomName,
  config: JsonObject,
  plan: JsonObject,
});
const relay = { seq: Seq, room: RoomName, from: Rank, to: Rank };
const Sdp = z.string().min(1).max(MAX_MESSAGE_BYTES);
const Offer = z.strictObject({ type: z.literal('offer'), ...relay, sdp: Sdp });
const Answer = z.strictObject({ type: z.literal('answer'), ...relay, sdp: Sdp });
/** An RTCIceCandidateInit; null ends the candidates (end-of-candidates). */
const Ice = z.strictObject({
  type: z.literal('ice'),
  ...relay,
  candidate: z.strictObject({
    candidate: z.string().max(4096),
    sdpMid: z.string().max(256).nullable().optional(),
    sdpMLineIndex: z.number().int().min(0).max(1024).nullable().optional(),
    usernameFragment: z.string().max(256).nullable().optional(),
  }).nullable(),
});

/** Every message a member may send. */
export const ClientMessageSchema = z.discriminatedUnion('type', [Join, Leave, Config, Offer, Answer, Ice]);
export type ClientMessage = z.infer<typeof ClientMessageSchema>;
/** The signalling messages the server forwards from one rank to another, unchanged but for `seq`. */
export type RelayMessage = Extract<ClientMessage, { type: 'offer' | 'answer' | 'ice' }>;
/** The `type`s a member may send, in the order the refusals list them. */
export const CLIENT_TYPES = ['join', 'leave', 'config', 'offer', 'answer', 'ice'] as const;
export const RELAY_TYPES: readonly string[] = ['offer', 'answer', 'ice'];

/** The membership as every member sees it: ranks ascending; `epoch` counts the changes. */
export interface Membership {
  room: string;
  members: number[];
  host: number;
  epoch: number;
}

/** Everything the server sends. */
export type ServerMessage =
  | (
    & { type: 'welcome'; rank: number; config: Record<string, unknown> | null; plan: Record<string, unknown> | null }
    & Membership
  )
  | ({ type: 'members' } & Membership)
  | { type: 'config'; room: string; config: Record<string, unknown>; plan: Record<string, unknown> }
  | Omit<RelayMessage, 'seq'>
  | { type: 'error'; message: string; seq?: number };

/** A message read off the wire, or why it was refused. */
export type Parsed = { ok: true; message: ClientMessage } | { ok: false; error: string; seq?: number };

const encoder = new TextEncoder();

/** UTF-8 bytes of `text`, counted without encoding more than `limit + 1`: a string's bytes are at least its length. */
function utf8BytesOver(text: string, limit: number): boolean {
  if (text.length > limit) return true;
  return text.length * 3 > limit && encoder.encode(text).length > limit;
}

/**
 * Reads one WebSocket frame: its size first (before any parsing), then JSON, then the type, then the schema.
 * @param data a text frame's string; any other frame (binary) is refused, tensors never pass through a room.
 * @returns the message, or an error naming what was wrong and what is allowed (never throws).
 */
export function parseClientMessage(data: unknown, maxBytes = MAX_MESSAGE_BYTES): Parsed {
  if (typeof data !== 'string') {
    return { ok: false, error: 'binary frames are refused: a room carries JSON signalling text only, never tensors' };
  }
  if (utf8BytesOver(data, maxBytes)) {
    return { ok: false, error: `message over ${maxBytes} bytes refused (the limit for one message)` };
  }
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch (e) {
    return { ok: false, error: `malformed JSON: ${(e as Error).message}; send one JSON object per message` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return {
      ok: false,
      error: `a message is a JSON object with a "type", got ${Array.isArray(value) ? 'an array' : typeof value}`,
    };
  }
  const raw = value as Record<string, unknown>;
  const seq = typeof raw.seq === 'number' ? raw.seq : undefined;
  if (!CLIENT_TYPES.includes(raw.type as never)) {
    return {
      ok: false,
      seq,
      error: `unknown message type ${JSON.stringify(raw.type ?? null)}; allowed: ${CLIENT_TYPES.join(', ')}` +
        ' (a room relays signalling and membership only, never tensors)',
    };
  }
  const r = ClientMessageSchema.safeParse(raw);
  if (!r.success) {
    const issue = firstIssue(r.error.issues);
    const where = issue.path.length ? issue.path.join('.') : '(message)';
    return { ok: false, seq, error: `'${raw.type}' message: ${where}: ${issue.message}` };
  }
  return { ok: true, message: r.data };
}
