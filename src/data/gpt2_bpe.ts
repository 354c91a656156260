/** GPT-2's byte-level BPE (r50k_base) through the `gpt-tokenizer` package. */
import { decode as bpeDecode, encode as bpeEncode } from 'gpt-tokenizer/encoding/r50k_base';
import type { Tokenizer, TokenizerJSON } from './tokenizer.ts';

/** GPT-2's vocabulary size (50 000 merges + 256 bytes + <|endoftext|>). */
export const GPT2_VOCAB = 50257;

export class Gpt2Tokenizer implements Tokenizer {
  readonly kind = 'gpt2';
  readonly vocabSize = GPT2_VOCAB;
  encode(text: string): Int32Array {
    return Int32Array.from(bpeEncode(text));
  }
  decode(ids: ArrayLike<number>): string {
    return bpeDecode(Array.from(ids));
  }
  toJSON(): TokenizerJSON {
    return { kind: 'gpt2' };
  }
}
