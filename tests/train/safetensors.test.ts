import { deepStrictEqual, equal, rejects } from 'node:assert/strict';
import { decodeSafetensors, encodeSafetensors } from '../../src/util/safetensors.ts';

const tensors = [
  { name: 'a', shape: [2, 3], data: Float32Array.from([1, 2, 3, 4, 5, 6]) },
  { name: 'b.bias', shape: [1], data: Float32Array.from([-0.5]) },
];

Deno.test('safetensors: round trip with metadata; header length and alignment follow the format', async () => {
  const bytes = await encodeSafetensors(tensors, { step: '7' });
  const hlen = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  equal(hlen % 8, 0);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + hlen)));
  deepStrictEqual(header.a, { dtype: 'F32', shape: [2, 3], data_offsets: [0, 24] });
  const { tensors: t, metadata } = await decodeSafetensors(bytes);
  equal(metadata.step, '7');
  deepStrictEqual(Array.from(t.get('a')!.data), [1, 2, 3, 4, 5, 6]);
  deepStrictEqual(Array.from(t.get('b.bias')!.data), [-0.5]);
});

Deno.test('safetensors: truncated, altered and garbage files are rejected with a reason', async () => {
  const bytes = await encodeSafetensors(tensors, {});
  await rejects(() => decodeSafetensors(bytes.subarray(0, 5), 'x'), /shorter than the 8-byte header length/);
  await rejects(() => decodeSafetensors(bytes.subarray(0, bytes.length - 4), 'x'), /SHA-256/);
  const flipped = bytes.slice();
  flipped[flipped.length - 1] ^= 1;
  await rejects(() => decodeSafetensors(flipped, 'x'), /SHA-256/);
  const garbage = new Uint8Array(64).fill(0x41);
  await rejects(() => decodeSafetensors(garbage, 'x'), /header length/);
  const badJson = bytes.slice();
  badJson[9] = 0x7b; // '{{' at the start of the header
  await rejects(() => decodeSafetensors(badJson, 'x'), /not valid JSON/);
});
