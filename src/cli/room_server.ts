/**
 * The HTTP and WebSocket glue of `npm run room` (docs/design.md#a-classroom-room): Deno.serve serves
 * the built demo (room_static.ts) and upgrades `/room` to a WebSocket whose frames go to the pure
 * state machine (src/comm/room/room_hub.ts); this file only carries out what the hub answers.
 * Nothing else is listened for, and nothing but JSON text frames is read.
 */
import { POLICY_VIOLATION, RoomHub } from '../comm/room/room_hub.ts';
import type { Outcome } from '../comm/room/room_hub.ts';
import { DEFAULT_LIMITS, type RoomLimits } from '../comm/room/limits.ts';
import { isolated, serveStatic } from './room_static.ts';

/** The path a member's WebSocket connects to. */
export const ROOM_PATH = '/room';

export interface RoomServerOptions {
  /** Interface to listen on: 127.0.0.1 (this machine) or 0.0.0.0 (a LAN). */
  hostname: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  /** The folder of the built demo (Vite's dist/). */
  dist: string;
  /** The join code every member must give; undefined: none. */
  code?: string;
  /** PEM certificate and key: serve HTTPS and WSS (a LAN address is a secure context only so); absent, HTTP. */
  tls?: { cert: string; key: string };
  limits?: RoomLimits;
  /** Where a line goes when the server closes a connection itself (too many refusals, no join in time). */
  log?: (line: string) => void;
}

export interface RoomServer {
  hostname: string;
  /** The port actually listened on (the chosen one with `port: 0`). */
  port: number;
  hub: RoomHub;
  /** Resolves when the server has stopped. */
  finished: Promise<void>;
  /** Closes every socket and stops listening. */
  shutdown(): Promise<void>;
}

/**
 * Starts the room server and resolves once it listens.
 * @throws Error when the address cannot be bound (in use, not an interface of this machine).
 */
export async function startRoomServer(o: RoomServerOptions): Promise<RoomServer> {
  const hub = new RoomHub(o.code, o.limits ?? DEFAULT_LIMITS);
  const sockets = new Map<number, WebSocket>();
  let nextId = 0;

  const carry = (id: number, out: Outcome) => {
    for (const d of out.send) {
      const ws = sockets.get(d.to);
      if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify(d.message));
    }
    if (out.close) {
      const ws = sockets.get(id);
      sockets.delete(id);
      ws?.close(out.close.code, out.close.reason);
      o.log?.(`room: closed connection ${id}: ${out.close.reason}`);
    }
  };

  const upgrade = (req: Request): Response => {
    const id = nextId++;
    if (!hub.open(id, performance.now())) {
      return isolated('too many connections waiting to join; try again shortly\n', 503, { 'Retry-After': '5' });
    }
    let up: { socket: WebSocket; response: Response };
    try {
      up = Deno.upgradeWebSocket(req);
    } catch (e) {
      hub.close(id);
      return isolated(`not a WebSocket upgrade: ${(e as Error).message}\n`, 400);
    }
    const { socket, response } = up;
    sockets.set(id, socket);
    socket.onmessage = (e) => {
      let out: Outcome;
      try {
        out = hub.receive(id, e.data, performance.now());
      } catch (err) {
        // A bug in the hub: said, and this connection alone is closed (1011), so a class's room stays up.
        o.log?.(`room: internal error on connection ${id}: ${(err as Error).stack ?? err}`);
        out = { ...hub.close(id), close: { code: 1011, reason: 'internal error' } };
      }
      carry(id, out);
    };
    socket.onclose = () => {
      sockets.delete(id);
      carry(id, hub.close(id));
    };
    // An error is followed by close, which does the leaving.
    socket.onerror = () => {};
    return response;
  };

  let listening!: (addr: Deno.NetAddr) => void;
  const addr = new Promise<Deno.NetAddr>((r) => (listening = r));
  const server = Deno.serve({
    hostname: o.hostname,
    port: o.port,
    ...o.tls,
    onListen: (a) => listening(a as Deno.NetAddr),
    onError: (e) => isolated(`internal error: ${(e as Error).message}\n`, 500),
  }, (req) => {
    const url = new URL(req.url);
    if (url.pathname === ROOM_PATH) {
      if (req.headers.get('upgrade')?.toLowerCase() !== 'websocket') {
        return isolated(`${ROOM_PATH} is the room's WebSocket; connect with new WebSocket(...)\n`, 426);
      }
      return upgrade(req);
    }
    return serveStatic(o.dist, url.pathname, req.method);
  });
  const a = await addr;
  // Sockets that never join are closed, so idle ones cannot hold every pending slot.
  const sweep = setInterval(() => {
    for (const id of hub.expired(performance.now())) {
      const ws = sockets.get(id);
      sockets.delete(id);
      carry(id, hub.close(id));
      ws?.close(POLICY_VIOLATION, 'no join in time');
      o.log?.(`room: closed connection ${id}: no join in ${hub.limits.joinTimeoutMs / 1000} s`);
    }
  }, 1000);
  const finished = server.finished.finally(() => clearInterval(sweep));
  return {
    hostname: a.hostname,
    port: a.port,
    hub,
    finished,
    shutdown: async () => {
      for (const ws of sockets.values()) ws.close(1001, 'server stopping');
      await server.shutdown();
      await finished;
    },
  };
}
