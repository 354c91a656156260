import { deepStrictEqual as assertEquals, doesNotThrow, notDeepStrictEqual, throws } from 'node:assert/strict';
import { BATCH_ORDER, checkBatchOrder, microBatchRows, SPLIT_ID, TextDataset } from '../../src/data/dataset.ts';
import { mixSeed, Random } from '../../src/util/random.ts';
import { MixtureDataset } from '../../src/data/mixture.ts';
import { CharTokenizer, tokenizerFromJSON } from '../../src/data/tokenizer.ts';
import { Gpt2Tokenizer } from '../../src/data/gpt2_bpe.ts';

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));

Deno.test('char tokenizer: vocabulary of Tiny Shakespeare, round trip, JSON round trip', async () => {
  const tok = CharTokenizer.fromText(text);
  assertEquals(tok.vocabSize, 65); // nanoGPT's shakespeare_char reports 65 characters
  const s = 'First Citizen:\nBefore we proceed';
  assertEquals(tok.decode(tok.encode(s)), s);
  const again = await tokenizerFromJSON(tok.toJSON());
  assertEquals(Array.from(again.encode(s)), Array.from(tok.encode(s)));
  throws(() => tok.encode('€'), /not in the 65-character vocabulary/);
});

Deno.test('gpt2 tokenizer: known ids and round trip', () => {
  const tok = new Gpt2Tokenizer();
  assertEquals(Array.from(tok.encode('Hello world')), [15496, 995]);
  assertEquals(tok.decode(tok.encode(text.slice(0, 500))), text.slice(0, 500));
  assertEquals(tok.vocabSize, 50257);
});

Deno.test('dataset: 90/10 split, targets are inputs shifted by one, batches reproducible from (seed, step)', () => {
  const tok = CharTokenizer.fromText(text);
  const ds = new TextDataset(tok.encode(text), 32);
  assertEquals(ds.val.length, Math.floor(text.length * 0.1));
  assertEquals(ds.train.length + ds.val.length, text.length);
  const a = ds.batch('train', 4, 32, 7, 123);
  const b = ds.batch('train', 4, 32, 7, 123);
  assertEquals(Array.from(a.x), Array.from(b.x));
  for (let i = 0; i < 4; i++) {
    assertEquals(Array.from(a.x.subarray(i * 32 + 1, i * 32 + 32)), Array.from(a.y.subarray(i * 32, i * 32 + 31)));
  }
  const c = ds.batch('train', 4, 32, 7, 124);
  const d = ds.batch('train', 4, 32, 8, 123);
  notDeepStrictEqual(Array.from(a.x), Array.from(c.x));
  notDeepStrictEqual(Array.from(a.x), Array.from(d.x));
});

Deno.test('dataset: a too-short corpus is a clear error', () => {
  throws(
    () => new TextDataset(new Int32Array(50), 64, 0.1, 'data file x.txt'),
    /x\.txt has 50 tokens: too short for block size 64/,
  );
});

/** Rows of every (micro-batch, dp rank) of a G-row global batch, concatenated in (micro, rank) order. */
function splitRows(
  draw: (from: number, to: number) => { x: Int32Array; y: Int32Array },
  g: number,
  m: number,
  dp: number,
) {
  const x: number[] = [], y: number[] = [];
  for (let j = 0; j < m; j++) {
    for (let r = 0; r < dp; r++) {
      const { from, to } = microBatchRows(j, g / m, r, dp);
      const part = draw(from, to);
      x.push(...part.x);
      y.push(...part.y);
    }
  }
  return { x, y };
}

Deno.test('dataset: every split of the global batch (micro-batches × dp) reads exactly the plain batch’s rows', () => {
  const tok = CharTokenizer.fromText(text);
  const ids = tok.encode(text);
  const ds = new TextDataset(ids, 16);
  const mix = new MixtureDataset(
    [new TextDataset(ids.subarray(0, 300_000), 16), new TextDataset(ids.subarray(300_000), 16)],
    [0.7, 0.3],
    ['a', 'b'],
  );
  const g = 24;
  for (const [name, data] of [['one file', ds], ['mixture', mix]] as const) {
    for (const split of ['train', 'val'] as const) {
      for (const step of [0, 5]) {
        const plain = data.batch(split, g, 16, 3, step);
        for (const [m, dp] of [[1, 1], [2, 1], [4, 1], [1, 2], [2, 3], [3, 4], [24, 1], [1, 24]]) {
          const got = splitRows((from, to) => data.rows(split, 16, 3, step, from, to), g, m, dp);
          assertEquals(got.x, Array.from(plain.x), `${name} ${split} step ${step}: ${m} micro-batches × dp ${dp} (x)`);
          assertEquals(got.y, Array.from(plain.y), `${name} ${split} step ${step}: ${m} micro-batches × dp ${dp} (y)`);
        }
      }
    }
  }
  // The mixture's corpus choices follow their rows too.
  const whole = mix.batch('train', g, 16, 3, 1).source;
  assertEquals(mix.rows('train', 16, 3, 1, 10, 14).source, whole.slice(10, 14));
  // A plain run reads what it read before batch order 2: row k at the k-th draw of generator (seed, split, step, 0).
  const rng = new Random(mixSeed(3, SPLIT_ID.train, 2, 0)), plain = ds.batch('train', 8, 16, 3, 2);
  for (let k = 0; k < 8; k++) {
    const off = rng.int(ds.train.length - 16);
    assertEquals(Array.from(plain.x.subarray(k * 16, (k + 1) * 16)), Array.from(ds.train.subarray(off, off + 16)));
  }
  // A plain run's batch is the first rows of the step's generator: a larger global batch extends it.
  assertEquals(
    Array.from(ds.batch('train', 8, 16, 3, 2).x),
    Array.from(ds.batch('train', 16, 16, 3, 2).x.slice(0, 8 * 16)),
  );
  assertEquals(microBatchRows(2, 8, 1, 4), { from: 18, to: 20 });
  throws(() => microBatchRows(0, 6, 0, 4), /6 rows per micro-batch must be a positive multiple of dp 4/);
  throws(() => microBatchRows(0, 8, 4, 4), /rank 4 in 0 … 3/);
  throws(() => ds.rows('train', 16, 3, 0, 4, 2), /rows \[4, 2\): expected whole numbers with 0 ≤ from ≤ to/);
});

Deno.test('checkBatchOrder: an old-order checkpoint resumes only where both orders read the same rows', () => {
  doesNotThrow(() => checkBatchOrder(BATCH_ORDER, 4, 'ckpt'));
  doesNotThrow(() => checkBatchOrder(undefined, 1, 'ckpt'), 'one micro-batch: the same rows in both orders');
  doesNotThrow(() => checkBatchOrder(1, 1, 'ckpt'));
  throws(
    () => checkBatchOrder(undefined, 2, 'runs/x/ckpt.safetensors'),
    /runs\/x\/ckpt\.safetensors was written under batch order 1 \(before batch orders were recorded\), this build draws batch order 2: with 2 micro-batches per step the two draw different rows.*Resume it with the build that wrote it, or start a new run/,
  );
  throws(() => checkBatchOrder(1, 4, 'c'), /batch order 1, this build draws batch order 2: with 4 micro-batches/);
  throws(() => checkBatchOrder(3, 1, 'c'), /batch order 3, this build draws batch order 2/);
});
