/**
 * What a tamperer (or a bad disk) does to checkpoint files, for the integrity tests: edit the
 * safetensors header and keep the data, turn a file into the legacy format (data digest only),
 * flip a byte, and snapshot a folder's bytes so a refusal can be shown to leave them unchanged.
 */
import { deepStrictEqual } from 'node:assert/strict';
import { sha256Hex } from '../../src/util/digest.ts';
import { decodeSafetensors, encodeSafetensors } from '../../src/util/safetensors.ts';

type Header = Record<string, unknown> & { __metadata__: Record<string, string> };

/** The header of safetensors bytes and where its data starts. */
export function readHeader(bytes: Uint8Array): { header: Header; data: Uint8Array } {
  const hlen = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  return { header: JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + hlen))), data: bytes.subarray(8 + hlen) };
}

/** `bytes` with its header edited in place by `edit` (digest left as it was) and the data kept. */
export function rewriteHeader(bytes: Uint8Array, edit: (h: Header) => void): Uint8Array {
  const { header, data } = readHeader(bytes);
  edit(header);
  let text = JSON.stringify(header);
  text += ' '.repeat((8 - (new TextEncoder().encode(text).length % 8)) % 8);
  const json = new TextEncoder().encode(text);
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

/** `bytes` as a file written before whole-file digests: `data_sha256` of the data section, no `sha256`. */
export async function toLegacy(bytes: Uint8Array): Promise<Uint8Array> {
  const digest = await sha256Hex(readHeader(bytes).data);
  return rewriteHeader(bytes, (h) => {
    delete h.__metadata__.sha256;
    h.__metadata__.data_sha256 = digest;
  });
}

/** A copy of `bytes` with the byte `fromEnd` from the end (inside the data) inverted. */
export function flipByte(bytes: Uint8Array, fromEnd = 1): Uint8Array {
  const out = bytes.slice();
  out[out.length - fromEnd] ^= 0xff;
  return out;
}

/** Every file under `dir` (recursively) by relative path, with its bytes. */
export async function snapshot(dir: string): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  const walk = async (rel: string) => {
    for await (const e of Deno.readDir(`${dir}/${rel}`)) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory) await walk(p);
      else out.set(p, await Deno.readFile(`${dir}/${p}`));
    }
  };
  await walk('');
  return out;
}

/** Asserts that `dir` holds exactly the files of `before`, byte for byte. */
export async function assertUnchanged(dir: string, before: Map<string, Uint8Array>, why: string): Promise<void> {
  const after = await snapshot(dir);
  deepStrictEqual([...after.keys()].sort(), [...before.keys()].sort(), `${why}: the same files`);
  for (const [p, b] of before) deepStrictEqual(after.get(p), b, `${why}: ${p} is byte-for-byte unchanged`);
}

/**
 * `bytes` (a checkpoint or rank file) as written before batch orders were recorded: the same tensors and
 * metadata without `batch_order`, re-signed, so only the missing order (data/dataset.ts checkBatchOrder) tells them apart.
 */
export async function withoutBatchOrder(bytes: Uint8Array): Promise<Uint8Array> {
  const { tensors, metadata } = await decodeSafetensors(bytes, 'checkpoint');
  const { batch_order: _, ...old } = metadata;
  return await encodeSafetensors([...tensors.values()], old);
}
