/** Runs the CLI in a subprocess, as a user would. */
import { testBackend } from './gpu.ts';

/** A one-layer model of width 16 that trains in about a second per step: the CLI tests' run, logging every step. */
export const TINY_RUN = [
  '--n-layer',
  '1',
  '--n-embd',
  '16',
  '--n-head',
  '2',
  '--block-size',
  '16',
  '--batch-size',
  '4',
  '--eval-interval',
  '1000',
  '--sample-tokens',
  '0',
  '--log-interval',
  '1',
];
const root = new URL('../../', import.meta.url).pathname;

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** CLIs whose runs open a GPU, and (plan) the flags under which they do. */
const GPU_CLIS: Record<string, string[] | null> = {
  'train.ts': null,
  'memorization.ts': null,
  'experiment.ts': null,
  'plan.ts': ['--measure', '--calibrate'],
  'scale.ts': null,
};

/**
 * `args` plus `--gpu=<the suite's backend>` for a CLI that opens a GPU, so `GPU=dawn` runs the
 * CLI processes — every rank of a parallel run — on Dawn too. Left as given when `args` picks
 * a backend itself or the suite runs on the CLIs' default.
 */
export function withTestBackend(script: string, args: string[]): string[] {
  const backend = testBackend();
  if (backend === 'wgpu' || !(script in GPU_CLIS) || args.some((a) => a === '--gpu' || a.startsWith('--gpu='))) {
    return args;
  }
  const when = GPU_CLIS[script];
  return when === null || when.some((w) => args.includes(w)) ? [...args, `--gpu=${backend}`] : args;
}

/** `deno run -A src/cli/<script> ...args` from the project root, on the suite's backend ({@link withTestBackend}). */
export async function runCli(script: string, args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ['run', '-A', `src/cli/${script}`, ...withTestBackend(script, args)],
    cwd: root,
    env: { XDG_RUNTIME_DIR: '/tmp', ...env },
    stdout: 'piped',
    stderr: 'piped',
  }).output();
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout), stderr: new TextDecoder().decode(out.stderr) };
}

/**
 * The `loss` of every step line of a metrics.jsonl, indexed by step.
 * @throws Error for a step logged twice: a resume that kept the lines past its checkpoint
 *   would otherwise hide behind the map's last write.
 */
export async function readLosses(path: string): Promise<Map<number, number>> {
  const m = new Map<number, number>();
  for (const line of (await Deno.readTextFile(path)).split('\n')) {
    if (!line.trim()) continue;
    const o = JSON.parse(line);
    if (typeof o.loss !== 'number') continue;
    if (m.has(o.step)) throw new Error(`${path}: step ${o.step} is logged twice`);
    m.set(o.step, o.loss);
  }
  return m;
}

/** @throws Error unless the logged steps are exactly 0 … n−1, naming the first missing or extra one. */
export function assertSteps(losses: Map<number, number>, n: number): void {
  for (let s = 0; s < n; s++) {
    if (!losses.has(s)) throw new Error(`step ${s} of 0…${n - 1} is missing (${losses.size} logged)`);
  }
  for (const s of losses.keys()) {
    if (!(Number.isInteger(s) && s >= 0 && s < n)) throw new Error(`step ${s} is outside 0…${n - 1}`);
  }
}

/** The losses of steps 0 … n−1 of a metrics.jsonl, in order. @throws Error on a duplicated, missing or extra step. */
export async function lossSeries(path: string): Promise<number[]> {
  const m = await readLosses(path);
  assertSteps(m, m.size);
  return [...Array(m.size).keys()].map((s) => m.get(s)!);
}
