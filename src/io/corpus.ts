/**
 * Training data from disk: a corpus file read as UTF-8 text, and the corpora of a data spec
 * tokenised into a {@link MixtureDataset}. Deno file system only.
 */
import type { TrainConfig } from '../train/config.ts';
import { makeTokenizer, type Tokenizer, tokenizerFromJSON, type TokenizerJSON } from '../data/tokenizer.ts';
import { MixtureDataset, parseDataSpec } from '../data/mixture.ts';
import { exists } from './atomic.ts';

/** The project root, for the shipped data when the CLI runs from another folder. */
const PROJECT_ROOT = new URL('../../', import.meta.url);

/**
 * Reads a UTF-8 text file for training. A relative path that does not exist from the
 * current folder is tried from the project root too, so the shipped data is found wherever
 * the CLI is started.
 * @throws Error naming the file when it is missing, not UTF-8 or empty.
 */
export async function readCorpus(path: string): Promise<string> {
  if (!path.startsWith('/') && !(await exists(path))) {
    const fromRoot = new URL(path, PROJECT_ROOT).pathname;
    if (await exists(fromRoot)) path = fromRoot;
  }
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new Error(`Data file '${path}' not found (--data expects a UTF-8 text file)`);
    }
    throw new Error(`Cannot read data file '${path}': ${(e as Error).message}`);
  }
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new Error(`Data file '${path}' is not valid UTF-8 text`);
  }
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  if (!text.length) throw new Error(`Data file '${path}' is empty`);
  return text;
}

/**
 * Reads the corpora of a data spec (`a.txt` or `a.txt:0.95,b.txt:0.05`) and tokenises them.
 * A new char tokenizer's vocabulary is the union of the characters of every file, so any mix
 * (and a later re-weighting of the same files) encodes with it; a resumed run passes its
 * checkpoint's tokenizer instead.
 * @throws Error naming a file that is missing, empty, not UTF-8, too short, or holds a
 *   character outside the given tokenizer; or a malformed spec (see parseDataSpec).
 */
export async function loadTrainingData(
  cfg: Pick<TrainConfig, 'data' | 'tokenizer' | 'blockSize' | 'valFraction'>,
  saved: TokenizerJSON | null = null,
): Promise<{ tokenizer: Tokenizer; data: MixtureDataset; texts: string[] }> {
  const sources = parseDataSpec(cfg.data);
  const texts = await Promise.all(sources.map((s) => readCorpus(s.path)));
  const tokenizer = saved ? await tokenizerFromJSON(saved) : await makeTokenizer(cfg.tokenizer, texts.join(''));
  const corpora = sources.map((s, i) => {
    let tokens: Int32Array;
    try {
      tokens = tokenizer.encode(texts[i]);
    } catch (e) {
      throw new Error(`data file '${s.path}': ${(e as Error).message} (the run's tokenizer was built from other data)`);
    }
    return { name: sources.length === 1 ? `data file '${s.path}'` : s.path, tokens, weight: s.weight };
  });
  return { tokenizer, data: MixtureDataset.fromTokens(corpora, cfg.blockSize, cfg.valFraction), texts };
}
