/**
 * safetensors encoding (huggingface/safetensors): 8-byte little-endian header length, a
 * JSON header of dtype/shape/data_offsets per tensor plus string `__metadata__`, then the
 * raw little-endian tensor bytes. One SHA-256 in the metadata (`sha256`) covers the whole
 * header's meaning — every tensor entry and every other metadata key — and the data, so a
 * reader refuses a truncated or altered file, header included, instead of training on it.
 */
import { z } from 'zod';
import { canonicalJson, SHA256_HEX, sha256Hex, zodIssues } from './digest.ts';

/** One F32 tensor. */
export interface NamedTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/** Metadata key of the digest over the canonical header and the data. */
export const DIGEST_KEY = 'sha256';
/** The digest of files written before {@link DIGEST_KEY}: the data section only. */
export const LEGACY_DIGEST_KEY = 'data_sha256';
/** The flag that lets a run read a file carrying only {@link LEGACY_DIGEST_KEY}. */
export const ALLOW_LEGACY_FLAG = '--allow-legacy-checkpoint';

/** Raised for any malformed checkpoint; the message names the file, what is wrong and what is loaded instead. */
export class CorruptCheckpointError extends Error {
  constructor(readonly what: string, readonly detail: string) {
    super(
      `Corrupt checkpoint ${what}: ${detail}. Only a checkpoint whose digests and contents verify is loaded; ` +
        'the file is left unchanged: restore an intact copy, or start a new run with another --out',
    );
    this.name = 'CorruptCheckpointError';
  }
}

/**
 * Checks that every `required` metadata key, and every `optional` one a file carries (keys added
 * after files were already written), holds a whole number in decimal digits.
 * @throws CorruptCheckpointError naming `what`, the key and its value.
 */
export function checkWholeNumbers(
  metadata: Record<string, string>,
  what: string,
  required: readonly string[],
  optional: readonly string[] = [],
): void {
  for (const k of [...required, ...optional.filter((k) => metadata[k] !== undefined)]) {
    if (!/^\d+$/.test(metadata[k] ?? '')) {
      throw new CorruptCheckpointError(what, `metadata '${k}' is '${metadata[k]}', expected a whole number`);
    }
  }
}

/** Raised for a file written before whole-file digests when {@link ALLOW_LEGACY_FLAG} was not given. */
export class LegacyCheckpointError extends CorruptCheckpointError {
  constructor(what: string, detail: string) {
    super(what, detail);
    this.name = 'LegacyCheckpointError';
    this.message =
      `Legacy checkpoint ${what}: ${detail}. Pass ${ALLOW_LEGACY_FLAG} to read it: every file's '${LEGACY_DIGEST_KEY}' is still ` +
      'required and verified, and the next checkpoint the run writes has the whole-file digest. The file is left unchanged';
  }
}

/** How strict a read is. */
export interface DecodeOptions {
  /** Accept a file carrying only the legacy data digest (it must still match). */
  allowLegacy?: boolean;
  /**
   * A file written by another tool (a Hugging Face checkpoint), which carries no digest of ours:
   * the structure is still checked (header, dtypes, bounds, exact tiling); no digest is required.
   */
  foreign?: boolean;
}

const u64 = z.number().int().nonnegative();
const TensorEntry = z.strictObject({ dtype: z.string(), shape: z.array(u64), data_offsets: z.tuple([u64, u64]) });
const Metadata = z.record(z.string(), z.string());

/**
 * SHA-256 of (canonical header length as u64 LE) ‖ canonical header ‖ data, where the canonical
 * header is the header with {@link DIGEST_KEY} left out of `__metadata__`, as canonical JSON.
 */
async function contentDigest(
  tensors: Record<string, unknown>,
  metadata: Record<string, string>,
  data: Uint8Array,
): Promise<string> {
  const { [DIGEST_KEY]: _, ...rest } = metadata;
  const canon = new TextEncoder().encode(canonicalJson({ ...tensors, __metadata__: rest }));
  const len = new Uint8Array(8);
  new DataView(len.buffer).setBigUint64(0, BigInt(canon.length), true);
  return await sha256Hex(len, canon, data);
}

/** Serialises tensors and string metadata to safetensors bytes, adding the {@link DIGEST_KEY} digest (any digest keys in `metadata` are replaced). */
export async function encodeSafetensors(tensors: NamedTensor[], metadata: Record<string, string>): Promise<Uint8Array> {
  let offset = 0;
  const entries: Record<string, unknown> = {};
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (n !== t.data.length) {
      throw new Error(`safetensors: '${t.name}' has ${t.data.length} values for shape [${t.shape}]`);
    }
    entries[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  const data = new Uint8Array(offset);
  let o = 0;
  for (const t of tensors) {
    data.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), o);
    o += t.data.byteLength;
  }
  const { [DIGEST_KEY]: _d, [LEGACY_DIGEST_KEY]: _l, ...meta } = metadata;
  const header = { ...entries, __metadata__: { ...meta, [DIGEST_KEY]: await contentDigest(entries, meta, data) } };
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8; // keeps tensor data 8-byte aligned
  if (padded !== json.length) {
    json = new TextEncoder().encode(JSON.stringify(header) + ' '.repeat(padded - json.length));
  }
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

/**
 * Parses safetensors bytes, checking structure, the digest, bounds, and that the tensors tile the
 * data section exactly. `metadata` comes back without the digest keys; `legacy` is true when
 * only {@link LEGACY_DIGEST_KEY} vouched for the file.
 * @throws LegacyCheckpointError for a legacy file without `opts.allowLegacy`;
 *   CorruptCheckpointError naming the problem otherwise (`what` names the file in messages).
 */
export async function decodeSafetensors(
  bytes: Uint8Array,
  what = '',
  opts: DecodeOptions = {},
): Promise<{ tensors: Map<string, NamedTensor>; metadata: Record<string, string>; legacy: boolean }> {
  if (bytes.length < 8) {
    throw new CorruptCheckpointError(what, `file is ${bytes.length} bytes, shorter than the 8-byte header length`);
  }
  const hlen = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  if (hlen > bytes.length - 8) {
    throw new CorruptCheckpointError(
      what,
      `header length ${hlen} exceeds the file's ${bytes.length - 8} remaining bytes`,
    );
  }
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + hlen)));
  } catch (e) {
    throw new CorruptCheckpointError(what, `header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    throw new CorruptCheckpointError(what, 'header is not a JSON object');
  }
  const { __metadata__: rawMeta, ...rawEntries } = header as Record<string, unknown>;
  const meta = Metadata.safeParse(rawMeta ?? {});
  if (!meta.success) {
    throw new CorruptCheckpointError(what, `__metadata__ must map names to strings: ${zodIssues(meta.error)}`);
  }
  const metadata = meta.data;
  const data = bytes.subarray(8 + hlen);
  const legacy = opts.foreign ? false : await verifyDigest(what, rawEntries, metadata, data, opts);
  const entries = z.record(z.string(), TensorEntry).safeParse(rawEntries);
  if (!entries.success) throw new CorruptCheckpointError(what, `tensor entries malformed: ${zodIssues(entries.error)}`);
  const tensors = new Map<string, NamedTensor>();
  let covered = 0;
  for (const [name, info] of Object.entries(entries.data)) {
    if (info.dtype !== 'F32') {
      throw new CorruptCheckpointError(what, `tensor '${name}' has dtype ${info.dtype}; only F32 is supported`);
    }
    const [a, b] = info.data_offsets;
    const n = info.shape.reduce((x, y) => x * y, 1);
    if (!(b <= data.length && b - a === n * 4)) {
      throw new CorruptCheckpointError(
        what,
        `tensor '${name}' offsets [${a}, ${b}] do not fit shape [${info.shape}] in ${data.length} data bytes`,
      );
    }
    covered += b - a;
    const copy = new Float32Array(n);
    new Uint8Array(copy.buffer).set(data.subarray(a, b));
    tensors.set(name, { name, shape: info.shape, data: copy });
  }
  // Equal sizes with every tensor in bounds still allow overlaps; sorted contiguity rules them out.
  const spans = Object.values(entries.data).map((t) => t.data_offsets).sort((x, y) => x[0] - y[0]);
  if (covered !== data.length || spans.some(([a], i) => a !== (i === 0 ? 0 : spans[i - 1][1]))) {
    throw new CorruptCheckpointError(
      what,
      `tensors do not tile the ${data.length} data bytes exactly (gaps, overlaps or trailing bytes)`,
    );
  }
  const { [DIGEST_KEY]: _d, [LEGACY_DIGEST_KEY]: _l, ...plain } = metadata;
  return { tensors, metadata: plain, legacy };
}

/** Checks the file's digest; returns whether it was the legacy one. */
async function verifyDigest(
  what: string,
  entries: Record<string, unknown>,
  metadata: Record<string, string>,
  data: Uint8Array,
  opts: DecodeOptions,
): Promise<boolean> {
  const digest = metadata[DIGEST_KEY], legacy = metadata[LEGACY_DIGEST_KEY];
  if (digest !== undefined) {
    if (!SHA256_HEX.test(digest) || digest !== (await contentDigest(entries, metadata, data))) {
      throw new CorruptCheckpointError(
        what,
        `contents do not match its SHA-256 '${DIGEST_KEY}' (which covers every tensor entry, every metadata value and the data): the file was altered or truncated`,
      );
    }
    return false;
  }
  if (legacy === undefined) {
    throw new CorruptCheckpointError(
      what,
      `metadata has no '${DIGEST_KEY}' digest; every checkpoint must carry one (a file written before it must carry '${LEGACY_DIGEST_KEY}' and be read with ${ALLOW_LEGACY_FLAG})`,
    );
  }
  if (!opts.allowLegacy) {
    throw new LegacyCheckpointError(
      what,
      `written before whole-file digests: it carries '${LEGACY_DIGEST_KEY}' (data only), not '${DIGEST_KEY}'`,
    );
  }
  if (legacy !== (await sha256Hex(data))) {
    throw new CorruptCheckpointError(
      what,
      `tensor data does not match its legacy SHA-256 '${LEGACY_DIGEST_KEY}': the file was altered or truncated`,
    );
  }
  return true;
}

/**
 * The same tensors and metadata re-encoded with the current digest when `bytes` is a verified
 * legacy file (otherwise `bytes` itself, after verification). Works in memory: the file is untouched.
 * @throws the errors of {@link decodeSafetensors} with `allowLegacy`.
 */
export async function upgradeLegacySafetensors(bytes: Uint8Array, what: string): Promise<Uint8Array> {
  const { tensors, metadata, legacy } = await decodeSafetensors(bytes, what, { allowLegacy: true });
  return legacy ? await encodeSafetensors([...tensors.values()], metadata) : bytes;
}
