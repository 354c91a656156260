/**
 * What one room server allows (docs/design.md#a-classroom-room), and the per-connection token
 * bucket that refuses floods. Pure: time comes in as milliseconds from the caller's clock.
 */
import { MAX_MESSAGE_BYTES } from './messages.ts';

/** The caps of one server. Counts are members, rooms and messages; times in ms. */
export interface RoomLimits {
  /** Rooms held at once; a join that would create one more is refused. */
  maxRooms: number;
  /** Members of one room (its world of tabs); a join beyond it is refused. */
  maxMembers: number;
  /** UTF-8 bytes of one message, checked before it is parsed. */
  maxBytes: number;
  /** Messages a connection may send at once (the bucket's capacity). */
  burst: number;
  /** Messages per second the bucket refills. */
  ratePerSecond: number;
  /** Refused messages after which the connection is closed (code 1008, policy violation). */
  maxStrikes: number;
  /** Connections that have not joined a room yet; more are turned away at the upgrade. */
  maxPending: number;
  /** How long a connection may stay without joining before it is closed. */
  joinTimeoutMs: number;
}

/**
 * Defaults sized for a class: thirty-odd tabs, each signalling once to every other (an offer or
 * answer and a few ICE candidates per pair) on joining, which the burst must take in one go.
 */
export const DEFAULT_LIMITS: RoomLimits = {
  maxRooms: 16,
  maxMembers: 64,
  maxBytes: MAX_MESSAGE_BYTES,
  burst: 512,
  ratePerSecond: 100,
  maxStrikes: 50,
  maxPending: 64,
  joinTimeoutMs: 30_000,
};

/** A token bucket: `burst` tokens, refilled at `ratePerSecond`; each message takes one. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(private readonly burst: number, private readonly ratePerSecond: number, now: number) {
    this.tokens = burst;
    this.last = now;
  }

  /** Takes one token at time `now` (ms); false when none is left (the message is refused). */
  take(now: number): boolean {
    const dt = Math.max(0, now - this.last);
    this.last = Math.max(this.last, now);
    this.tokens = Math.min(this.burst, this.tokens + (dt * this.ratePerSecond) / 1000);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
