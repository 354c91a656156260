/**
 * Tokenizers: character-level (nanoGPT's shakespeare_char) and GPT-2's byte-level BPE
 * (gpt2_bpe.ts, loaded only when asked for: its merge table is most of a bundle's size).
 */

export type TokenizerKind = 'char' | 'gpt2';

/** Serialisable description, stored in checkpoints so a run decodes what it trained on. */
export type TokenizerJSON = { kind: 'char'; chars: string } | { kind: 'gpt2' };

export interface Tokenizer {
  readonly kind: TokenizerKind;
  readonly vocabSize: number;
  /** Token ids of `text`. @throws Error for characters outside a char vocabulary. */
  encode(text: string): Int32Array;
  decode(ids: ArrayLike<number>): string;
  toJSON(): TokenizerJSON;
}

/** A character vocabulary: the sorted distinct code points of `chars`. */
export class CharTokenizer implements Tokenizer {
  readonly kind = 'char';
  private readonly stoi = new Map<string, number>();
  private readonly itos: string[];

  constructor(chars: string) {
    this.itos = [...new Set(Array.from(chars))].sort();
    this.itos.forEach((ch, i) => this.stoi.set(ch, i));
  }

  /** The tokenizer for a corpus: every character it uses. */
  static fromText(text: string): CharTokenizer {
    return new CharTokenizer(text);
  }

  get vocabSize(): number {
    return this.itos.length;
  }

  encode(text: string): Int32Array {
    const chars = Array.from(text);
    const out = new Int32Array(chars.length);
    for (let i = 0; i < chars.length; i++) {
      const id = this.stoi.get(chars[i]);
      if (id === undefined) {
        throw new Error(`Character ${JSON.stringify(chars[i])} is not in the ${this.vocabSize}-character vocabulary`);
      }
      out[i] = id;
    }
    return out;
  }

  decode(ids: ArrayLike<number>): string {
    let s = '';
    for (let i = 0; i < ids.length; i++) s += this.itos[ids[i]] ?? '\uFFFD';
    return s;
  }

  toJSON(): TokenizerJSON {
    return { kind: 'char', chars: this.itos.join('') };
  }
}

/** Builds a tokenizer for a corpus (char) or by name (gpt2). */
export async function makeTokenizer(kind: TokenizerKind, corpus: string): Promise<Tokenizer> {
  return kind === 'gpt2' ? new (await import('./gpt2_bpe.ts')).Gpt2Tokenizer() : CharTokenizer.fromText(corpus);
}

/** Restores a tokenizer saved with `toJSON`. @throws Error for an unknown kind. */
export async function tokenizerFromJSON(j: TokenizerJSON): Promise<Tokenizer> {
  if (j.kind === 'char') return new CharTokenizer(j.chars);
  if (j.kind === 'gpt2') return new (await import('./gpt2_bpe.ts')).Gpt2Tokenizer();
  throw new Error(`Unknown tokenizer kind '${(j as { kind: string }).kind}'; allowed: char, gpt2`);
}
