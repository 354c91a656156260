/**
 * `npm run bench -- decode` (src/bench/decode.ts, docs/design.md#tree-attention-decoding): on a flat network the
 * simulated per-token latency equals the α-β cost of each method (tree: two allReduces, ring: one
 * hop at p = 2) plus the modelled compute of the longest shard; bytes per token match the formula
 * and are 0 at cp = 1; flags are checked.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { benchDecode, DECODE_BENCH_DEFAULTS, type DecodeBenchRow } from '../../src/bench/decode.ts';
import { decodeTable, parseDecodeArgs } from '../../src/bench/decode_cli.ts';
import { decodeCombineBytes } from '../../src/models/tree_decode.ts';

const close = (a: number, b: number, what: string) =>
  ok(Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b)), `${what}: ${a} vs ${b}`);

Deno.test('bench decode: latency is the α-β formula plus the longest shard, bytes the formula', async () => {
  const o = {
    ...DECODE_BENCH_DEFAULTS,
    lens: [38, 6], // even: equal shards at cp = 2 (ragged ones at cp = 3)
    cps: [1, 2, 3],
    net: 'link=10GB/s,2us',
    layers: 2,
    heads: 2,
    headSize: 8,
    tokens: 3,
    hbmGBps: 100,
  };
  const rows = await benchDecode(o, () => {});
  equal(rows.length, 2 * 3 * 2);
  const d = { b: 1, nh: 2, hs: 8 }, rowsBh = 2, alpha = 2, perByte = 1 / 10e3; // µs per byte at 10 GB/s
  const get = (m: string, t: number, cp: number) => rows.find((r) => r.method === m && r.t === t && r.cp === cp)!;
  for (const t of o.lens) {
    const compute = (len: number) => (2 * len * 16 * 4) / (o.hbmGBps * 1e3);
    for (const m of ['tree', 'ring']) {
      const one = get(m, t, 1);
      equal(one.bytesPerToken, 0);
      close(one.usPerToken, o.layers * compute(t), `${m} cp=1 T=${t}`);
    }
    const c2 = compute(t / 2);
    const tree = o.layers * (c2 + 2 * alpha + 4 * (rowsBh + rowsBh * (d.hs + 1)) * perByte);
    const ring = o.layers * (c2 + alpha + 4 * rowsBh * (d.hs + 2) * perByte);
    close(get('tree', t, 2).usPerToken, tree, `tree cp=2 T=${t}`);
    close(get('ring', t, 2).usPerToken, ring, `ring cp=2 T=${t}`);
    for (const m of ['tree', 'ring'] as const) {
      const r: DecodeBenchRow = get(m, t, 3);
      equal(r.bytesPerToken, o.layers * Math.max(...[0, 1, 2].map((k) => decodeCombineBytes(m, d, 3, k))));
      ok(r.maxAbsDiff < 1e-5);
    }
  }
  ok(decodeTable(rows).includes('ring/tree'));
});

Deno.test('bench decode flags: defaults, lists and refusals', () => {
  const o = parseDecodeArgs([]);
  equal(o.cps.join(','), DECODE_BENCH_DEFAULTS.cps.join(','));
  equal(parseDecodeArgs(['--cp', '2,4', '--net', 'nvlink-ib']).cps.join(','), '2,4');
  throws(() => parseDecodeArgs(['--cp', '32']), /--cp expects comma-separated integers in 1 … 16/);
  throws(() => parseDecodeArgs(['--lens', '1k']), /--lens expects/);
  throws(() => parseDecodeArgs(['--hbm=0']), /--hbm expects a positive GB\/s figure/);
  throws(() => parseDecodeArgs(['--net', 'fast']), /unknown field 'fast'/);
  throws(() => parseDecodeArgs(['--bogus']), /see --help/);
});
