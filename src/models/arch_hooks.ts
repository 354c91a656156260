/**
 * Architectures registered at run time beside registry.ts's built-in table: a model written as
 * pieces over a ModelContext (model.ts LayeredModel) plus its split declaration (the tensor-parallel
 * role of each of its parameters, by name pattern) is all a new architecture gives; the rank
 * models, the parameter counts and the placement read it through this module
 * (docs/design.md#accounting-derived-from-the-model). The tests add a toy architecture this way.
 */
import type { Piece } from './model.ts';
import type { ModelFactory } from './registry.ts';

/**
 * How a parameter takes part in tensor parallelism (src/parallel/tensor/tp_table.ts lists what
 * each role means and splits): declared here so that a model can state its own.
 */
export type SplitRole =
  | 'replicated'
  | 'vocab'
  | 'column'
  | 'column-qkv'
  | 'column-inner'
  | 'row'
  | 'row-inner'
  | 'channel';

/** A split declaration: parameter-name pattern → role; the first match wins. */
export type SplitDeclaration = readonly (readonly [RegExp, SplitRole])[];

/** What a registered architecture gives. */
export interface ArchEntry {
  /** Builds the model (a LayeredModel, to run over ranks): as a built-in one, a rank's `place`ment when given. */
  create: ModelFactory;
  /** The piece (block index, embed, head, tied, shared) that uses each parameter. */
  pieceOf(name: string): Piece;
  /** The tensor-parallel role of each parameter. */
  split: SplitDeclaration;
}

const REGISTERED = new Map<string, ArchEntry>();

/**
 * Adds architecture `name`. `builtIn` are the names it must not shadow (registry.ts passes its own).
 * @throws Error when the name is taken or not a lower-case `--arch` name.
 */
export function registerArch(name: string, entry: ArchEntry, builtIn: readonly string[] = []): void {
  if (!/^[a-z][a-z0-9-]*$/.test(name)) throw new Error(`registerArch: '${name}' is not a lower-case --arch name`);
  if (builtIn.includes(name) || REGISTERED.has(name)) {
    throw new Error(`registerArch: '${name}' is already an architecture`);
  }
  REGISTERED.set(name, entry);
}

/** The registered architecture `name`, or undefined. */
export const registeredArch = (name: string): ArchEntry | undefined => REGISTERED.get(name);

/** Every registered architecture's split declaration, in registration order. */
export const registeredSplits = (): SplitDeclaration[] => [...REGISTERED.values()].map((e) => e.split);
