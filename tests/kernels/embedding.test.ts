import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn, rng } from '../util/assert.ts';
import { buildTokenIndex, embeddingBackward, embeddingForward, type TokenIndex } from '../../src/kernels/embedding.ts';
import { embeddingBackwardRef, embeddingRef } from '../../src/reference/embedding.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** Token ids in [0, v); a fraction `hot` of them is token `v − 1`, so ids repeat heavily. */
function makeTokens(n: number, v: number, seed: number, hot = 0.3): Int32Array {
  const r = rng(seed);
  return Int32Array.from({ length: n }, () => (r() < hot ? v - 1 : Math.floor(r() * v)));
}

Deno.test('embedding reference backward matches finite differences', () => {
  const b = 2, t = 3, tmax = 4, v = 5, c = 3;
  const tokens = Int32Array.from([1, 4, 1, 1, 0, 4]);
  const wte = randn(v * c, 1), wpe = randn(tmax * c, 2), w = randn(b * t * c, 3);
  const g = embeddingBackwardRef(tokens, w, v, tmax, b, t, c);
  assertFiniteDiff((x) => dot(embeddingRef(tokens, x, wpe, b, t, c), w), wte, g.dwte, 'dwte', {
    samples: 100,
  });
  assertFiniteDiff((x) => dot(embeddingRef(tokens, wte, x, b, t, c), w), wpe, g.dwpe, 'dwpe', {
    samples: 100,
  });
});

interface Case {
  b: number;
  t: number;
  tmax: number;
  v: number;
  c: number;
  tokens?: Int32Array;
  fill?: number;
  /** Drop maxCount from the index, as a hand-made TokenIndex would. */
  noMaxCount?: boolean;
}

async function check(
  gpu: Gpu,
  { b, t, tmax, v, c, tokens, fill = 0.5, noMaxCount = false }: Case,
  seed = 1,
) {
  const what = `B=${b} T=${t} Tmax=${tmax} V=${v} C=${c}`;
  const tok = tokens ?? makeTokens(b * t, v, seed);
  const wte = randn(v * c, seed + 1),
    wpe = randn(tmax * c, seed + 2),
    dout = randn(b * t * c, seed + 3);
  const ttok = gpu.upload(tok, [b, t], 'i32');
  const twte = gpu.upload(Float32Array.from(wte), [v, c]),
    twpe = gpu.upload(Float32Array.from(wpe), [tmax, c]);
  const tout = gpu.empty([b, t, c]);
  embeddingForward(gpu, ttok, twte, twpe, tout, b, t);
  assertClose(await gpu.read(tout), embeddingRef(tok, wte, wpe, b, t, c), `${what} out`);

  const built = buildTokenIndex(gpu, tok, v);
  const index: TokenIndex = noMaxCount
    ? { offsets: built.offsets, positions: built.positions, release: () => built.release() }
    : built;
  const tdout = gpu.upload(Float32Array.from(dout), [b, t, c]);
  const tdwte = gpu.upload(new Float32Array(v * c).fill(fill), [v, c]);
  const tdwpe = gpu.upload(new Float32Array(tmax * c).fill(fill), [tmax, c]);
  embeddingBackward(gpu, index, tdout, tdwte, tdwpe, b, t);
  index.release();
  const g = embeddingBackwardRef(tok, dout, v, tmax, b, t, c);
  const seen = new Set(tok);
  for (
    const [name, tensor, ref, rowUsed] of [
      ['dwte', tdwte, g.dwte, (row: number) => seen.has(row)],
      ['dwpe', tdwpe, g.dwpe, (row: number) => row < t],
    ] as const
  ) {
    const got = await gpu.read(tensor);
    assertClose(got, ref.map((x) => x + fill), `${what} ${name}`);
    assertRelRms(got.map((x) => x - fill), ref, `${what} ${name}`);
    // Rows no token or position reaches (absent ids, positions ≥ T) are not written at all.
    for (let i = 0; i < got.length; i++) {
      if (!rowUsed(Math.floor(i / c)) && got[i] !== Math.fround(fill)) {
        throw new Error(`${what} ${name}: untouched row ${Math.floor(i / c)} changed to ${got[i]}`);
      }
    }
  }
  for (const x of [ttok, twte, twpe, tout, tdout, tdwte, tdwpe]) x.release();
}

gpuTest(
  'embedding forward/backward, ragged shapes, V ≤ B·T (grid over vocabulary)',
  async (gpu) => {
    let seed = 1;
    for (const c of [1, 7, 64, 65, 128, 257]) {
      await check(gpu, { b: 3, t: 21, tmax: 32, v: 65, c }, seed++);
      await check(gpu, { b: 1, t: 7, tmax: 7, v: 1, c }, seed++); // every token the same
    }
    await check(gpu, { b: 5, t: 63, tmax: 64, v: 257, c: 65 }, seed++);
    await check(gpu, { b: 8, t: 64, tmax: 256, v: 65, c: 128, fill: -3 }, seed++);
  },
);

gpuTest('embedding backward, V > B·T (grid over sorted slots), GPT-2 vocabulary', async (gpu) => {
  let seed = 100;
  for (const c of [1, 7, 65, 257]) await check(gpu, { b: 2, t: 7, tmax: 9, v: 5003, c }, seed++);
  await check(gpu, { b: 1, t: 1, tmax: 1, v: 257, c: 64 }, seed++);
  await check(gpu, { b: 4, t: 63, tmax: 1024, v: 50257, c: 48 }, seed++);
  await check(gpu, {
    b: 2,
    t: 5,
    tmax: 8,
    v: 5003,
    c: 16,
    tokens: Int32Array.from([0, 5002, 0, 0, 17, 5002, 17, 0, 1, 0]),
  }, seed++);
});

// More than 65535 occurrences of one token: a single invocation looping over all of them would
// be cut off by lavapipe's loop cap; the backward splits the run over several dispatches.
gpuTest('embedding backward with a token repeated 70 000 times', async (gpu) => {
  const b = 70, t = 1000, c = 2;
  const tokens = makeTokens(b * t, 3, 7, 0.98);
  await check(gpu, { b, t, tmax: 1024, v: 3, c, tokens });
  await check(gpu, { b, t, tmax: 1000, v: 3, c, tokens, noMaxCount: true });
  await check(gpu, { b, t, tmax: 1000, v: 70_001, c, tokens: tokens.map((x) => x * 35_000) }); // slots grid
});

gpuTest(
  'buildTokenIndex sorts positions by token and rejects ids outside the vocabulary',
  async (gpu) => {
    const index = buildTokenIndex(gpu, Int32Array.from([2, 0, 2, 3, 0, 2]), 5);
    assertClose(await gpu.read(index.offsets), [0, 2, 2, 5, 6, 6], 'offsets');
    assertClose(await gpu.read(index.positions), [1, 4, 0, 2, 5, 3], 'positions');
    if (index.maxCount !== 3) throw new Error(`maxCount ${index.maxCount}, expected 3`);
    index.release();
    assertThrows(
      () => buildTokenIndex(gpu, Int32Array.from([1, 5, 0]), 5),
      'token id 5 at position 1 is outside the vocabulary [0, 5)',
    );
    assertThrows(() => buildTokenIndex(gpu, Int32Array.from([-1]), 5), 'token id -1 at position 0');
    assertThrows(
      () => buildTokenIndex(gpu, Int32Array.from([0]), 0),
      'vocabSize must be an integer ≥ 1',
    );
  },
);

gpuTest(
  'embedding forward turns an out-of-range token into NaN; shapes are validated',
  async (gpu) => {
    const v = 4, c = 3;
    const wte = gpu.zeros([v, c]), wpe = gpu.zeros([8, c]), out = gpu.empty([1, 2, c]);
    const tok = gpu.upload(Int32Array.from([1, v]), [1, 2], 'i32');
    embeddingForward(gpu, tok, wte, wpe, out, 1, 2);
    const y = await gpu.read(out);
    if (
      !y.subarray(0, c).every((x) => x === 0) || !y.subarray(c).every(Number.isNaN)
    ) throw new Error(`got ${y}`);
    const tf = gpu.empty([1, 2]);
    assertThrows(
      () => embeddingForward(gpu, tf, wte, wpe, out, 1, 2),
      'tokens must have dtype i32, got f32',
    );
    assertThrows(
      () => embeddingForward(gpu, tok, wte, wpe, out, 1, 9),
      'T=9 exceeds the 8 positions of wpe [8,3]',
    );
    const wpe2 = gpu.zeros([8, c + 1]);
    assertThrows(
      () => embeddingForward(gpu, tok, wte, wpe2, out, 1, 2),
      'wpe must have C=3 columns',
    );
    const index = buildTokenIndex(gpu, Int32Array.from([1, 2]), v + 1);
    assertThrows(
      () => embeddingBackward(gpu, index, out, wte, wpe, 1, 2),
      'index.offsets must be (V+1=5)',
    );
    for (const x of [wte, wpe, out, tok, tf, wpe2]) x.release();
    index.release();
  },
);
