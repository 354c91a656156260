/**
 * `npm run room -- [--port 4180] [--host 127.0.0.1] [--code WORD] [--dist dist] [--cert PEM --key PEM]`: a classroom room
 * (docs/design.md#a-classroom-room). Serves the built demo with the isolation headers and runs the
 * rendezvous the tabs of one run meet at — ranks, membership, the run's config and plan, WebRTC
 * signalling — until Ctrl-C. Tensors never pass through it.
 */
import { z } from 'zod';
import { parseCliArgs } from '../util/parse_cli.ts';
import { flagKeys, helpLines, parseArgsOptions, readFlag } from './flags.ts';
import { DEFAULT_LIMITS } from '../comm/room/limits.ts';
import { absolute } from './room_static.ts';
import { ROOM_PATH, type RoomServer, startRoomServer } from './room_server.ts';
import { runCli } from './main.ts';

/** The port `npm run room` listens on unless told otherwise. */
export const DEFAULT_ROOM_PORT = 4180;

export const RoomCliSchema = z.object({
  port: z.number().int().min(0).max(65535).default(DEFAULT_ROOM_PORT).describe('TCP port; 0 picks a free one'),
  host: z.string().min(1).max(255).default('127.0.0.1').describe(
    'interface: 127.0.0.1 is this machine only; a class on a LAN passes 0.0.0.0',
  ),
  code: z.string().min(1).max(128).optional().describe('join code every member must give'),
  dist: z.string().min(1).default('dist').describe('folder of the built demo (npm run build)'),
  cert: z.string().min(1).optional().describe(
    'PEM certificate file: serve HTTPS (with --key), which a LAN address needs for WebGPU',
  ),
  key: z.string().min(1).optional().describe('PEM private key file of --cert'),
  maxRooms: z.number().int().min(1).max(1024).default(DEFAULT_LIMITS.maxRooms).describe('rooms held at once'),
  maxMembers: z.number().int().min(1).max(1024).default(DEFAULT_LIMITS.maxMembers).describe('members (tabs) per room'),
});
export type RoomCliOptions = z.infer<typeof RoomCliSchema>;

const KEYS = flagKeys(RoomCliSchema);

const HELP = `Usage: npm run room -- [flags]

Serves the built demo (npm run build) with the cross-origin isolation headers and runs a room: it
hands out ranks, keeps each room's membership, the run's config and plan, and relays WebRTC
offers, answers and ICE candidates between members (WebSocket ${ROOM_PATH}). It never carries tensors.

${helpLines(KEYS).join('\n')}`;

/**
 * RoomCliSchema's values from `argv` (strict: an unknown flag is an error).
 * @throws Error naming the flag and what it accepts.
 */
export function parseRoomArgs(argv: string[]): RoomCliOptions & { help: boolean } {
  let parsed;
  try {
    parsed = parseCliArgs({
      args: argv,
      options: { ...parseArgsOptions(KEYS), help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: false,
    });
  } catch (e) {
    throw new Error(
      `${(e as Error).message.split('\n')[0]}; npm run room takes: ${KEYS.map((k) => `--${k.flag}`).join(', ')}`,
    );
  }
  const values: Record<string, unknown> = {}, raw = parsed.values as Record<string, string | boolean | undefined>;
  for (const k of KEYS) if (raw[k.flag] !== undefined) values[k.key] = readFlag(k, raw[k.flag]!, false, true);
  return { ...RoomCliSchema.parse(values), help: !!raw.help };
}

/** The addresses students type: this machine's non-loopback IPv4 ones when listening on every interface. */
function lanUrls(scheme: string, port: number): string[] {
  try {
    return Deno.networkInterfaces()
      .filter((i) => i.family === 'IPv4' && !i.address.startsWith('127.'))
      .map((i) => `${scheme}://${i.address}:${port}/`);
  } catch {
    return [];
  }
}

/**
 * Starts the room and prints where it listens (`room: listening on http://HOST:PORT/ (port PORT)`).
 * @throws Error for a bad flag or an address that cannot be bound.
 */
export async function startRoom(argv: string[]): Promise<RoomServer | null> {
  const o = parseRoomArgs(argv);
  if (o.help) {
    console.log(HELP);
    return null;
  }
  const limits = { ...DEFAULT_LIMITS, maxRooms: o.maxRooms, maxMembers: o.maxMembers };
  const tls = await readTls(o.cert, o.key), http = tls ? 'https' : 'http', ws = tls ? 'wss' : 'ws';
  let server: RoomServer;
  try {
    server = await startRoomServer({
      hostname: o.host,
      port: o.port,
      dist: o.dist,
      code: o.code,
      tls,
      limits,
      log: console.log,
    });
  } catch (e) {
    throw new Error(`cannot listen on ${o.host}:${o.port}: ${(e as Error).message} (pick another --port, or 0)`);
  }
  const everywhere = server.hostname === '0.0.0.0' || server.hostname === '::';
  const shown = server.hostname === '0.0.0.0'
    ? '127.0.0.1'
    : server.hostname === '::'
    ? '[::1]'
    : server.hostname.includes(':')
    ? `[${server.hostname}]`
    : server.hostname;
  console.log(`room: listening on ${http}://${shown}:${server.port}/ (port ${server.port})`);
  if (everywhere) {
    for (const u of lanUrls(http, server.port)) console.log(`room: students open ${u}`);
  } else console.log('room: this machine only; a class on a LAN passes --host 0.0.0.0');
  let built = true;
  try {
    await Deno.stat(`${o.dist}/index.html`);
  } catch {
    built = false;
  }
  console.log(
    built
      ? `room: serving ${absolute(o.dist)} with Cross-Origin-Opener-Policy and Cross-Origin-Embedder-Policy`
      : `room: no built demo in ${absolute(o.dist)} (run npm run build first); the room still does rendezvous`,
  );
  console.log(
    `room: members connect to ${ws}://${shown}:${server.port}${ROOM_PATH}${o.code ? ' with the join code' : ''}`,
  );
  return server;
}

/**
 * The PEM certificate and key of `--cert` and `--key`, or undefined when neither is given (plain HTTP).
 * @throws Error when only one is given, or a file cannot be read (naming it).
 */
async function readTls(cert?: string, key?: string): Promise<{ cert: string; key: string } | undefined> {
  if (!cert && !key) return undefined;
  if (!cert || !key) throw new Error('--cert and --key go together: give both PEM files (HTTPS) or neither (HTTP)');
  const read = async (path: string, flag: string) => {
    try {
      return await Deno.readTextFile(path);
    } catch (e) {
      throw new Error(`${flag} ${path}: cannot read it (${(e as Error).message})`);
    }
  };
  return { cert: await read(cert, '--cert'), key: await read(key, '--key') };
}

/** Runs the room until SIGINT or SIGTERM. @throws as {@link startRoom}. */
export async function main(argv: string[]): Promise<void> {
  const server = await startRoom(argv);
  if (!server) return;
  const stop = () => void server.shutdown();
  Deno.addSignalListener('SIGINT', stop);
  Deno.addSignalListener('SIGTERM', stop);
  await server.finished;
  console.log('room: stopped');
}

if (import.meta.main) await runCli(main);
