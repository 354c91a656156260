/**
 * Seeded randomness with a serialisable state, so a checkpoint can carry it and a batch or
 * sample can be reproduced exactly. The generator is SplitMix32-style counter hashing: the
 * state is one u32 that advances by a fixed odd constant, and any (seed, stream, step)
 * triple can be hashed to a fresh generator without replaying the sequence.
 */

/** A 32-bit avalanche hash (lowbias32, Chris Wellons' hash-prospector). */
export function hash32(x: number): number {
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x = (x ^ (x >>> 15)) >>> 0;
  x = Math.imul(x, 0x846ca68b) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

/** Hashes several integers into one seed. */
export function mixSeed(...parts: number[]): number {
  let h = 0x9e3779b9;
  for (const p of parts) h = hash32((h ^ hash32(p >>> 0)) + 0x9e3779b9);
  return h >>> 0;
}

export class Random {
  private spare: number | null = null;
  constructor(public state: number) {
    this.state = state >>> 0;
  }

  /** Uniform u32. */
  nextU32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    return hash32(this.state);
  }

  /** Uniform in [0, 1). */
  uniform(): number {
    return this.nextU32() / 4294967296;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.uniform() * n);
  }

  /** Standard normal (Box–Muller, caching the second value). */
  normal(): number {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    let u = 0;
    while (u === 0) u = this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }
}
