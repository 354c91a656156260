/**
 * safetensors encoding (huggingface/safetensors): 8-byte little-endian header length, a
 * JSON header of dtype/shape/data_offsets per tensor plus string `__metadata__`, then the
 * raw little-endian tensor bytes. A SHA-256 of the data section in the metadata lets a
 * reader reject a truncated or altered file instead of training on garbage.
 */

/** One F32 tensor. */
export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/** Raised for any malformed checkpoint; the message says what is wrong. */
export class CorruptCheckpointError extends Error {
  constructor(what: string, detail: string) {
    super(`Corrupt checkpoint ${what}: ${detail}`);
    this.name = 'CorruptCheckpointError';
  }
}

const DIGEST_KEY = 'data_sha256';

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Serialises tensors and string metadata to safetensors bytes. */
export async function encodeSafetensors(tensors: NamedTensor[], metadata: Record<string, string>): Promise<Uint8Array> {
  let offset = 0;
  const header: Record<string, unknown> = {};
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (n !== t.data.length) throw new Error(`safetensors: '${t.name}' has ${t.data.length} values for shape [${t.shape}]`);
    header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  const data = new Uint8Array(offset);
  let o = 0;
  for (const t of tensors) {
    data.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), o);
    o += t.data.byteLength;
  }
  header.__metadata__ = { ...metadata, [DIGEST_KEY]: await sha256Hex(data) };
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8; // keeps tensor data 8-byte aligned
  if (padded !== json.length) json = new TextEncoder().encode(JSON.stringify(header) + ' '.repeat(padded - json.length));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

/**
 * Parses safetensors bytes, checking structure, bounds and the data digest.
 * @throws CorruptCheckpointError naming the problem (`what` names the file in messages).
 */
export async function decodeSafetensors(
  bytes: Uint8Array,
  what = '',
): Promise<{ tensors: Map<string, NamedTensor>; metadata: Record<string, string> }> {
  if (bytes.length < 8) throw new CorruptCheckpointError(what, `file is ${bytes.length} bytes, shorter than the 8-byte header length`);
  const hlen = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  if (hlen > bytes.length - 8) throw new CorruptCheckpointError(what, `header length ${hlen} exceeds the file's ${bytes.length - 8} remaining bytes`);
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + hlen)));
  } catch (e) {
    throw new CorruptCheckpointError(what, `header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null) throw new CorruptCheckpointError(what, 'header is not a JSON object');
  const data = bytes.subarray(8 + hlen);
  const metadata = (header.__metadata__ ?? {}) as Record<string, string>;
  const digest = metadata[DIGEST_KEY];
  if (digest !== undefined && digest !== (await sha256Hex(data))) {
    throw new CorruptCheckpointError(what, 'tensor data does not match its SHA-256 (truncated or altered file)');
  }
  const tensors = new Map<string, NamedTensor>();
  for (const [name, v] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const info = v as { dtype?: string; shape?: number[]; data_offsets?: [number, number] };
    if (info.dtype !== 'F32') throw new CorruptCheckpointError(what, `tensor '${name}' has dtype ${info.dtype}; only F32 is supported`);
    const [a, b] = info.data_offsets ?? [-1, -1];
    const n = (info.shape ?? []).reduce((x, y) => x * y, 1);
    if (!(a >= 0 && b <= data.length && b - a === n * 4)) {
      throw new CorruptCheckpointError(what, `tensor '${name}' offsets [${a}, ${b}] do not fit shape [${info.shape}] in ${data.length} data bytes`);
    }
    const copy = new Float32Array(n);
    new Uint8Array(copy.buffer).set(data.subarray(a, b));
    tensors.set(name, { name, shape: info.shape ?? [], data: copy });
  }
  return { tensors, metadata };
}
