/**
 * The room server's state machine (docs/design.md#a-classroom-room), with no I/O: connections come
 * in as numbers, frames as strings, time as milliseconds, and every call returns what to send to
 * whom and whether to close the sender. The WebSocket glue (src/cli/room_server.ts) only carries
 * these out, so every refusal here is unit-testable and none can disturb another connection.
 *
 * Ranks: a join gets the smallest rank free in its room (0, 1, 2, … when nobody leaves), so the
 * world stays dense. The member that creates a room is its host and sets the run's config and
 * plan; when the host leaves, the smallest remaining rank becomes host.
 */
import {
  type ClientMessage,
  type Membership,
  parseClientMessage,
  type RelayMessage,
  type ServerMessage,
} from './messages.ts';
import { DEFAULT_LIMITS, type RoomLimits, TokenBucket } from './limits.ts';

/** One message to one connection. */
export interface Delivery {
  to: number;
  message: ServerMessage;
}

/** What a call asks the glue to do: send these, then close the sender when `close` is set. */
export interface Outcome {
  send: Delivery[];
  close?: { code: number; reason: string };
}

/** WebSocket close code for a policy violation (RFC 6455 §7.4.1). */
export const POLICY_VIOLATION = 1008;

interface Connection {
  id: number;
  opened: number;
  lastSeq: number;
  strikes: number;
  bucket: TokenBucket;
  room?: string;
  rank?: number;
}

interface Room {
  name: string;
  /** rank → connection id */
  members: Map<number, number>;
  host: number;
  epoch: number;
  config: Record<string, unknown> | null;
  plan: Record<string, unknown> | null;
}

/** A refusal, and whether it counts toward closing the connection. */
class Refusal {
  constructor(readonly message: string, readonly strike = true) {}
}

/** The rooms of one server and the connections in and around them. */
export class RoomHub {
  private readonly conns = new Map<number, Connection>();
  private readonly rooms = new Map<string, Room>();

  /**
   * @param code the join code every join must carry (undefined: none required).
   * @param limits the server's caps ({@link DEFAULT_LIMITS}).
   */
  constructor(private readonly code?: string, readonly limits: RoomLimits = DEFAULT_LIMITS) {}

  /** Connections that have not joined a room. */
  get pending(): number {
    let n = 0;
    for (const c of this.conns.values()) if (c.room === undefined) n++;
    return n;
  }

  /** Rooms held now. */
  get roomCount(): number {
    return this.rooms.size;
  }

  /**
   * Registers connection `id` at time `now` (ms).
   * @returns false when {@link RoomLimits.maxPending} connections are already waiting to join (turn it away).
   * @throws Error when `id` is already open (a glue bug, not a client's doing).
   */
  open(id: number, now: number): boolean {
    if (this.conns.has(id)) throw new Error(`connection ${id} is already open`);
    if (this.pending >= this.limits.maxPending) return false;
    const bucket = new TokenBucket(this.limits.burst, this.limits.ratePerSecond, now);
    this.conns.set(id, { id, opened: now, lastSeq: -1, strikes: 0, bucket });
    return true;
  }

  /** The membership of `room`, or null when no such room is held. */
  membership(room: string): Membership | null {
    const r = this.rooms.get(room);
    return r ? this.view(r) : null;
  }

  /**
   * One frame from connection `id` at time `now` (ms): rate limit, size, JSON, schema, sequence,
   * then the message itself. A refusal answers the sender alone with an `error` naming what was
   * wrong; after {@link RoomLimits.maxStrikes} refusals the sender is also closed. Frames of an
   * unknown or closed connection are dropped.
   */
  receive(id: number, data: unknown, now: number): Outcome {
    const c = this.conns.get(id);
    if (!c) return { send: [] };
    let seq: number | undefined;
    try {
      if (!c.bucket.take(now)) {
        throw new Refusal(
          `rate limit: over ${this.limits.burst} messages at once or ${this.limits.ratePerSecond} per second`,
        );
      }
      const p = parseClientMessage(data, this.limits.maxBytes);
      if (!p.ok) {
        seq = p.seq;
        throw new Refusal(p.error);
      }
      seq = p.message.seq;
      if (seq <= c.lastSeq) {
        throw new Refusal(`replayed or out-of-order seq ${seq}: each message's seq must exceed ${c.lastSeq}`);
      }
      c.lastSeq = seq;
      return this.dispatch(c, p.message);
    } catch (e) {
      if (!(e instanceof Refusal)) throw e;
      const out: Outcome = { send: [{ to: id, message: { type: 'error', message: e.message, seq } }] };
      if (e.strike && ++c.strikes >= this.limits.maxStrikes) {
        out.close = { code: POLICY_VIOLATION, reason: `${c.strikes} messages refused` };
        const message = `closing this connection: ${c.strikes} messages refused, the limit`;
        out.send.push({ to: id, message: { type: 'error', message } }, ...this.close(id).send);
      }
      return out;
    }
  }

  /** Connection `id` is gone: it leaves its room (the others get the new membership). Idempotent. */
  close(id: number): Outcome {
    const c = this.conns.get(id);
    if (!c) return { send: [] };
    const out = this.leave(c);
    this.conns.delete(id);
    return out;
  }

  /**
   * Connections that have waited past {@link RoomLimits.joinTimeoutMs} without joining, at time
   * `now` (ms): the glue closes them, so idle sockets cannot hold the pending slots.
   */
  expired(now: number): number[] {
    const out: number[] = [];
    for (const c of this.conns.values()) {
      if (c.room === undefined && now - c.opened > this.limits.joinTimeoutMs) out.push(c.id);
    }
    return out;
  }

  private dispatch(c: Connection, m: ClientMessage): Outcome {
    switch (m.type) {
      case 'join':
        return this.join(c, m);
      case 'leave':
        if (c.room === undefined) throw new Refusal('leave: this connection has not joined a room');
        return this.leave(c);
      case 'config':
        return this.setConfig(c, m);
      default:
        return this.relay(c, m);
    }
  }

  private join(c: Connection, m: Extract<ClientMessage, { type: 'join' }>): Outcome {
    if (c.room !== undefined) {
      throw new Refusal(`join: already in room '${c.room}' as rank ${c.rank}; send 'leave' first`);
    }
    if (this.code !== undefined && m.code !== this.code) {
      throw new Refusal(m.code === undefined ? 'join: this server requires a join code' : 'join: wrong join code');
    }
    let room = this.rooms.get(m.room);
    if (!room) {
      if (this.rooms.size >= this.limits.maxRooms) {
        throw new Refusal(`join: the server holds its maximum of ${this.limits.maxRooms} rooms; join an existing one`);
      }
      room = { name: m.room, members: new Map(), host: 0, epoch: 0, config: m.config ?? null, plan: m.plan ?? null };
      this.rooms.set(m.room, room);
    } else if (room.members.size >= this.limits.maxMembers) {
      throw new Refusal(`join: room '${m.room}' is full (${this.limits.maxMembers} members)`);
    }
    let rank = 0;
    while (room.members.has(rank)) rank++;
    if (room.members.size === 0) room.host = rank;
    room.members.set(rank, c.id);
    room.epoch++;
    c.room = room.name;
    c.rank = rank;
    const view = this.view(room);
    const send: Delivery[] = [{
      to: c.id,
      message: { type: 'welcome', rank, config: room.config, plan: room.plan, ...view },
    }];
    for (const [r, id] of room.members) if (r !== rank) send.push({ to: id, message: { type: 'members', ...view } });
    return { send };
  }

  private leave(c: Connection): Outcome {
    const room = c.room === undefined ? undefined : this.rooms.get(c.room);
    c.room = c.rank = undefined;
    if (!room) return { send: [] };
    for (const [r, id] of room.members) if (id === c.id) room.members.delete(r);
    if (room.members.size === 0) {
      this.rooms.delete(room.name);
      return { send: [] };
    }
    if (!room.members.has(room.host)) room.host = Math.min(...room.members.keys());
    room.epoch++;
    const view = this.view(room);
    return { send: [...room.members.values()].map((to) => ({ to, message: { type: 'members', ...view } })) };
  }

  private setConfig(c: Connection, m: Extract<ClientMessage, { type: 'config' }>): Outcome {
    const room = this.memberRoom(c, m.room);
    if (c.rank !== room.host) {
      throw new Refusal(
        `config: only the host (rank ${room.host}) sets the run's config and plan; you are rank ${c.rank}`,
      );
    }
    room.config = m.config;
    room.plan = m.plan;
    const message: ServerMessage = { type: 'config', room: room.name, config: m.config, plan: m.plan };
    return { send: [...room.members.values()].filter((id) => id !== c.id).map((to) => ({ to, message })) };
  }

  private relay(c: Connection, m: RelayMessage): Outcome {
    const room = this.memberRoom(c, m.room);
    if (m.from !== c.rank) {
      throw new Refusal(
        `${m.type}: 'from' ${m.from} is not your rank ${c.rank}; a member signals as its own rank only`,
      );
    }
    if (m.to === m.from) throw new Refusal(`${m.type}: 'to' is your own rank ${m.to}; signal another member`);
    const to = room.members.get(m.to);
    // A peer that left a moment ago is an ordinary race, not a hostile act: refused without a strike.
    if (to === undefined) {
      throw new Refusal(
        `${m.type}: rank ${m.to} is not in room '${room.name}' (members ${this.view(room).members.join(', ')})`,
        false,
      );
    }
    const { seq: _seq, ...message } = m;
    return { send: [{ to, message }] };
  }

  /** The sender's room, which `room` must name. @throws Refusal when not joined or naming another room. */
  private memberRoom(c: Connection, room: string): Room {
    if (c.room === undefined) throw new Refusal(`'${room}': join a room before signalling or setting its config`);
    if (room !== c.room) throw new Refusal(`wrong room '${room}': this connection is in room '${c.room}'`);
    return this.rooms.get(c.room)!;
  }

  private view(r: Room): Membership {
    return { room: r.name, members: [...r.members.keys()].sort((a, b) => a - b), host: r.host, epoch: r.epoch };
  }
}
