/**
 * Digests that make checkpoints tamper-evident: SHA-256 in hex, a canonical JSON form (keys
 * sorted at every depth, no whitespace) so a digest depends on what a header or manifest says
 * rather than on how it happens to be spelled, and zod issue formatting for the shape checks.
 */
import type { z } from 'zod';

/** SHA-256 of `parts` concatenated, as 64 lowercase hex digits. */
export async function sha256Hex(...parts: Uint8Array[]): Promise<string> {
  let bytes = parts[0] ?? new Uint8Array(0);
  if (parts.length > 1) {
    bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) {
      bytes.set(p, o);
      o += p.length;
    }
  }
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * `v` as JSON with object keys sorted (by UTF-16 code units) at every depth and no whitespace:
 * equal values give equal text whatever their key order. Non-finite numbers become `null`, as in
 * JSON.stringify; `undefined` object members are left out.
 */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canonicalJson(x))).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).filter((k) => (v as Record<string, unknown>)[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** A 64-hex-digit SHA-256, as written into headers and manifests. */
export const SHA256_HEX = /^[0-9a-f]{64}$/;

/** One line naming every problem zod found: `path: message; …`. */
export function zodIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || '(top level)'}: ${i.message}`).join('; ');
}
