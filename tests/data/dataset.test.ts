import { deepStrictEqual as assertEquals, notDeepStrictEqual, throws } from 'node:assert/strict';
import { TextDataset } from '../../src/data/dataset.ts';
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
