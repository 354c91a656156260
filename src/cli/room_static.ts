/**
 * The built demo as `npm run room` serves it: files under one folder (Vite's dist/), each response
 * with the two headers that make the page cross-origin isolated (docs/demo.md), and no path that
 * leaves the folder — `..` segments, encoded or not, and symlinks pointing out are refused.
 */
import { extname, join, resolve, sep } from 'node:path';

/** The headers of `vite dev` / `vite preview` (vite.config.ts): SharedArrayBuffer needs an isolated page. */
export const ISOLATION_HEADERS: Readonly<Record<string, string>> = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.jsonl': 'application/x-ndjson',
  '.map': 'application/json',
  '.wasm': 'application/wasm',
  '.wgsl': 'text/plain; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
};

/** A response carrying the isolation headers. */
export function isolated(body: BodyInit | null, status: number, headers: Record<string, string> = {}): Response {
  return new Response(body, {
    status,
    headers: { ...ISOLATION_HEADERS, 'X-Content-Type-Options': 'nosniff', ...headers },
  });
}

const text = (status: number, message: string) => isolated(`${message}\n`, status, { 'Content-Type': 'text/plain' });

/**
 * The segments of a URL path, percent-decoded, or null when one is `..`, `.`, empty inside the
 * path, or holds a slash, backslash or NUL once decoded (all ways out of the served folder).
 */
export function safeSegments(pathname: string): string[] | null {
  const parts = pathname.split('/').slice(1);
  const out: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    let s: string;
    try {
      s = decodeURIComponent(parts[i]);
    } catch {
      return null;
    }
    if (s === '' && i === parts.length - 1) break; // a trailing slash: the folder's index
    if (s === '' || s === '.' || s === '..' || /[/\\\0]/.test(s)) return null;
    out.push(s);
  }
  return out;
}

/**
 * Serves `pathname` from the folder `root`: `/` and folders give their index.html.
 * @returns 200 with the file; 403 for a path leaving `root`; 404 for a missing file (naming
 *   `npm run build` when `root` itself is missing); 405 for a method other than GET or HEAD.
 */
export async function serveStatic(root: string, pathname: string, method: string): Promise<Response> {
  if (method !== 'GET' && method !== 'HEAD') return text(405, `${method} not allowed: the room serves GET and HEAD`);
  const segments = safeSegments(pathname);
  if (segments === null) return text(403, `refused path '${pathname}': it leaves the served folder`);
  let base: string;
  try {
    base = await Deno.realPath(root);
  } catch {
    return text(404, `no built demo in ${root}: run npm run build first (or pass --dist FOLDER)`);
  }
  let path = join(base, ...segments);
  try {
    if ((await Deno.stat(path)).isDirectory) path = join(path, 'index.html');
    path = await Deno.realPath(path);
  } catch {
    return text(404, `not found: ${pathname}`);
  }
  // A symlink inside the folder may point anywhere; what is served must lie under it.
  if (path !== base && !path.startsWith(base.endsWith(sep) ? base : base + sep)) {
    return text(403, `refused path '${pathname}': it leaves the served folder`);
  }
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch {
    return text(404, `not found: ${pathname}`);
  }
  const size = (await file.stat()).size;
  const type = TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream';
  const headers = { 'Content-Type': type, 'Content-Length': String(size) };
  if (method === 'HEAD') {
    file.close();
    return isolated(null, 200, headers);
  }
  return isolated(file.readable, 200, headers);
}

/** `root` as an absolute path (for the line the server prints). */
export const absolute = (root: string) => resolve(root);
