/**
 * How each command README.md and the guides in docs/ give runs in tests/cli/doc_commands*.test.ts:
 * the table keyed by the command exactly as written, the run of one command by its rule, and the
 * guides' split into shards, each a test file that runs its guides' commands in document order in
 * its own scratch project (so `--out runs/mine` then `--out runs/mine --resume` meet), so that
 * `deno test --parallel` runs the shards side by side.
 */
import { equal } from 'node:assert/strict';
import { documentedCommands, fetchWhileServing, runShell, scratchProject, withFlags } from './doc_commands.ts';
import { gpt2File } from './gpt2_file.ts';
import { encodeSafetensors } from '../../src/util/safetensors.ts';
import { TORCH_BASELINE } from './torch_baseline.ts';

/** How a documented command runs here. */
export type Rule =
  | {
    /** Flags appended to its last `npm run` (the run made small), or to the `part`-th of `a && b`. */
    add?: string[];
    part?: number;
    /** Files the command reads, written into the scratch project first. */
    setup?: (dir: string) => Promise<void>;
    /** What its output must show besides a zero exit. */
    expect?: RegExp;
  }
  /**
   * A server that runs until stopped: the page it serves must answer and show `expect`. `serve` is
   * its URL, or a RegExp whose first group reads the URL from what it prints (a server told by
   * `add` to pick a free port, so no fixed port can be taken by another run).
   */
  | { serve: string | RegExp; expect: RegExp; add?: string[] }
  /** Why it cannot run on a 2-core machine without a GPU, or inside this suite. */
  | { skip: string }
  /** The test file that runs it as written and checks more of it than an exit code. */
  | { by: string };

// The guides' tiny run: trains in a few seconds a step on lavapipe; two layers so pp 2 divides them.
const SHAPE = ['--n-layer', '2', '--n-embd', '16', '--n-head', '2', '--block-size', '16', '--batch-size', '4'];
const QUIET = ['--eval-interval', '1000', '--eval-batches', '1', '--sample-tokens', '0', '--log-interval', '1'];
export const TINY = ['--steps', '2', ...SHAPE, ...QUIET];
const trains: Rule = { add: TINY, expect: /done: 2 steps/ };
// The MPI commands (docs/mpi-and-collectives.md, one in the README's tour): run as written, and held to the worker
// run, by their own test.
const MPI_README: Rule = { by: 'tests/cli/mpi_readme.test.ts' };
// The comm bench's smallest honest run: world 2, allReduce, a few calls per size.
const COMM_SMALL = ['--quick', '--worlds', '2', '--ops', 'allReduce'];

const root = new URL('../../', import.meta.url).pathname;

async function gpt2Checkpoint(dir: string): Promise<void> {
  await Deno.mkdir(`${dir}/gpt2`);
  const tensors = gpt2File({ nLayer: 2, nEmbd: 16, vocabSize: 50257, positions: 32 });
  await Deno.writeFile(`${dir}/gpt2/model.safetensors`, await encodeSafetensors(tensors, { format: 'pt' }));
}

/** Keyed by the command exactly as the guide writes it (comment removed). */
export const RULES: Record<string, Rule> = {
  'npm install && npm run train': trains,
  'npm test': { skip: 'the suite this test is part of' },
  'npm run train -- --help': { expect: /--n-layer/ },
  'npm run train -- --preset nanogpt-cpu': trains,
  'npm run train -- --arch mamba': trains,
  'npm run train -- --steps 2000 --n-layer 4 --lr 1e-3 --out runs/mine': trains,
  'npm run train -- --out runs/mine --resume': { add: ['--steps', '4'], expect: /done: 4 steps/ },
  'npm run train -- --data my.txt --tokenizer gpt2': {
    ...trains,
    setup: (dir) => Deno.copyFile(`${root}public/data/tinyshakespeare.txt`, `${dir}/my.txt`),
  },
  'npm run train -- --gpu=dawn': trains,
  'npm run train -- --precision f16-mixed': trains,
  'npm run train -- --dp 2 --pp 2 --micro-batches 2': trains,
  'npm run train -- --init-from gpt2/model.safetensors --tokenizer gpt2 --n-layer 12 --n-head 12 --n-embd 768 --block-size 256 --lr 1e-4 --min-lr 1e-5 --out runs/gpt2-ft':
    { ...trains, setup: gpt2Checkpoint },
  'npm run export -- --from runs/gpt2-ft/ckpt.safetensors --out model.safetensors': {},
  'npm run plan -- --dp 2 --tp 2 --pp 2': {},
  'npm run plan -- --dp 2 --pp 2 --measure': { add: SHAPE },
  'npm run train -- --dp 2 --zero 3 --steps 50': trains,
  'npm run train -- --tp 2 --sp --steps 50': trains,
  'npm run train -- --pp 2 --micro-batches 4 --pp-schedule gpipe': trains,
  'npm run train -- --pp 2 --micro-batches 4 --pp-schedule zb-h1': trains,
  'npm run train -- --cp 2 --cp-kind ring': trains,
  'npm run train -- --arch gpt-moe --ep 2 --dp 2': trains,
  'npm run train -- --arch mamba-moe --ep 2 --dp 4': trains,
  'npm run train -- --dp 2 --tp 2 --pp 2 --micro-batches 2 --net nvlink-ib': trains,
  'npm run train -- --arch mamba --tp 2 --pp 2 --micro-batches 2': trains,
  'npm run train -- --dp 2 --tp 2 --zero 3': trains,
  'npm run train -- --arch linear --tp 2 --sp': trains,
  'npm run train -- --arch recurrent-depth --n-layer 3 --tp 2 --cp 2': {
    add: ['--steps', '2', ...SHAPE.slice(2), ...QUIET],
    expect: /done: 2 steps/,
  },
  'npm run train -- --arch gpt-moe --tp 2 --sp': trains,
  'npm run plan -- --dp 2 --tp 2 --pp 2 --compress dp=powersgd:4,tp=fp16,pp=int8 --net pcie-eth': {},
  'npm run train -- --dp 2 --tp 2 --pp 2 --micro-batches 2 --compress dp=int8,tp=bf16,pp=int8': trains,
  'npm run train -- --dp 2 --compress naive:bf16': trains,
  'npm run train -- --dp 4 --sync diloco --inner-steps 50': trains,
  'npm run train -- --dp 4 --sync streaming-diloco --inner-steps 10 --fragments 2 --overlap-steps 4 --outer-quant int4':
    trains,
  'npm run train -- --dp 2 --tp 2 --sync co2 --inner-steps 10 --outer-clip 1': trains,
  'npm run experiment -- low-comm': {
    add: ['--steps', '2', '--eval-interval', '1', ...SHAPE, '--eval-batches', '1', '--methods', 'ddp,diloco-10'],
  },
  'npm run plan -- --search --world 1024 --model gpt3-175b --device h100-sxm --net nvlink-ib': {},
  'npm run plan -- --search --world 1024 --model gpt3-175b --device h100-sxm --net nvlink-ib --global-batch 1536': {},
  'npm run plan -- --search --world 1024 --model gpt3-175b --device a100-80g --net nvlink-ib --global-batch 1536': {
    expect: /^order {4}[\d,]+ of [\d,]+ plans are within \d+\.\d% of the best step time/m,
  },
  "npm run plan -- --search --world 64 --model 'layers=32,heads=32,hidden=4096,seq=4096,vocab=32000,batch=512' --device a100-80g":
    {},
  'npm run plan -- --model gpt3-175b --dp 16 --tp 8 --pp 8 --micro-batches 96 --precision bf16-mixed --recompute full --device a100-80g --net nvlink-ib --json price.json':
    { expect: /^ {2}step \d+ ms · MFU \d+\.\d% of 312\.0 TFLOP\/s/m },
  "npm run plan -- --advise 'layers=24,heads=32,hidden=2560,seq=2048,vocab=50257' --tp 2": {},
  "npm run plan -- --calibrate --out profile.json && npm run plan -- --model 'layers=4,heads=4,hidden=128,seq=128,vocab=256,batch=8' --dp 2 --micro-batches 2 --device profile.json":
    { add: ['--quick'], part: 0, expect: /^dispatch overhead .* µs per kernel[\s\S]*^ {2}step \d+ ms/m },
  'npm run bench -- model --device profile.json': {
    add: ['--plans', 'dp2', '--steps', '2'],
    expect: /^dp2 +\d[\d.]* +\d[\d.]* +\d+\.\d\d× +(yes|no)$/m,
  },
  'npm run bench -- matmul --json dev.json && npm run plan -- --search --world 8 --model megatron-1.7b --device dev.json':
    { add: ['--sizes', '128'], part: 0 },
  'npm run bench -- decode': { expect: /tree µs\/tok/ },
  'npm run bench -- comm': { add: [...COMM_SMALL, '--max-bytes', '4KiB'] },
  'npm run bench -- comm --net nvlink-ib --max-bytes 64MiB': {
    add: [...COMM_SMALL, '--min-bytes', '64MiB', '--no-mpi'],
  },
  'npm run bench -- comm --worlds 2,4 --ops allReduce --min-bytes 4KiB --max-bytes 16MiB --step 16': {
    add: [...COMM_SMALL, '--max-bytes', '4KiB', '--no-mpi'],
  },
  'npm run bench -- comm --data-plane shared --no-mpi': { add: [...COMM_SMALL, '--max-bytes', '4KiB'] },
  'mpirun -pmi-port -n 4 npm run bench -- comm --transport mpi': MPI_README,
  'mpirun -pmi-port -n 4 npm run bench -- comm --transport mpi --tune tune.json': MPI_README,
  'mpirun -pmi-port -n 4 npm run train -- --transport mpi --dp 2 --tp 2': MPI_README,
  'mpirun -pmi-port -n 4 npm run train -- --transport mpi --comm-backend mpi --dp 2 --tp 2': MPI_README,
  'mpirun -pmi-port -n 4 npm run train -- --transport mpi --comm-backend auto --comm-tuning tune.json --dp 2 --tp 2':
    MPI_README,
  'npm run dev': { serve: 'http://localhost:5173/', expect: /<title>/ },
  'npm run room -- --host 0.0.0.0 --code maple': {
    serve: /listening on (http:\/\/\S+)/,
    add: ['--port', '0'],
    expect: /<title>/,
  },
  'npm run build': {},
  'npm run test:e2e': { skip: 'the browser suite, which `npm test` runs right after this one' },
  'npm run scale -- --device h100-sxm': { add: ['--quick'] },
  'python3 scripts/torch_baseline.py --json torch.json': {
    skip: 'PyTorch on a CUDA GPU; docs/gpu-results.md records its runs',
  },
  'npm run scale -- --device h100-sxm --baseline torch.json --json scale.json': {
    add: ['--quick'],
    setup: (dir) => Deno.writeTextFile(`${dir}/torch.json`, JSON.stringify(TORCH_BASELINE)),
  },
  'bash scripts/gpu_suite.sh OUTDIR --device h200': {
    skip: 'minutes of a real GPU: the suite behind docs/gpu-results.md',
  },
};

/** A rule this test runs itself. */
type RunRule = Exclude<Rule, { skip: string } | { by: string }>;

/**
 * Runs `command` by its rule in the scratch project `dir`.
 * @returns why it failed, or null when it exited 0 and showed what the rule expects.
 */
export async function runDocumented(command: string, rule: RunRule, dir: string): Promise<string | null> {
  if ('serve' in rule) {
    const line = withFlags(command, rule.add ?? []);
    const page = await fetchWhileServing(line, dir, rule.serve, 120_000);
    if (page.status !== 200 || !rule.expect.test(page.body)) {
      return `'${line}' served ${page.url} with ${page.status}, not a page showing ${rule.expect}:\n${page.body}`;
    }
    return null;
  }
  await rule.setup?.(dir);
  const line = withFlags(command, rule.add ?? [], rule.part);
  const r = await runShell(line, dir, 300_000);
  if (r.code !== 0) return `'${line}' exited ${r.code}:\n${r.output.slice(-3000)}`;
  if (rule.expect && !rule.expect.test(r.output)) {
    return `'${line}' did not print ${rule.expect}:\n${r.output.slice(-3000)}`;
  }
  return null;
}

/**
 * The guides each shard runs; `other` runs every guide the named shards do not, so a new guide is
 * never left out. Commands depend on earlier ones only within their guide.
 */
export const SHARDS = {
  training: ['README.md', 'docs/training.md'],
  parallel: ['docs/parallel.md'],
  other: null,
} as const;

/**
 * Runs, as `t`'s steps, every command of the guides of `shard` ({@link SHARDS}) that this test
 * runs itself, in document order, in one scratch project.
 */
export async function runShard(t: Deno.TestContext, shard: keyof typeof SHARDS): Promise<void> {
  const named = new Set<string>(Object.values(SHARDS).flatMap((g) => g ?? []));
  const mine = (file: string) => SHARDS[shard]?.includes(file as never) ?? !named.has(file);
  const dir = await scratchProject();
  try {
    for (const c of await documentedCommands()) {
      const rule = RULES[c.command];
      if (!mine(c.file) || !rule || 'skip' in rule || 'by' in rule) continue;
      await t.step(`${c.file}:${c.line} ${c.command}`, async () => {
        equal(await runDocumented(c.command, rule, dir), null);
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
