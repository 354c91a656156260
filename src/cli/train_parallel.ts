/**
 * `npm run train -- --dp 2 …` (docs/design.md#parallel-training): a parallel training run from the CLI. The
 * plan is validated before anything starts (one `error:` line naming every broken rule); then
 * world-size Deno module workers (workers/rank.worker.ts, one WebGPU device each) train under
 * src/parallel/run/run.ts, rank 0's progress is printed nanoGPT-style, and the run directory gets
 * metrics.jsonl (one line per step with the elements sent per collective), trace.json
 * (`World.chromeTrace()`: wall and simulated clocks, the latter priced by --net), config.json
 * (with the plan), and the accounting — plan.txt (per rank bytes of params / grads / optimizer
 * / peak pool, elements per collective and dimension measured beside cost.ts's prediction)
 * and accounting.json (the same as data), and checkpoints: every rank's state at each checkpoint
 * step (ckptInterval, the end, the Pythia schedule) as one set named by ckpt-parallel.json
 * (src/io/checkpoint_set.ts); `--resume --out DIR` with the same parallel flags continues it.
 * Not an entry point of its own: src/cli/train.ts hands it every argv that names a parallel flag.
 *
 * Batch: the global batch is batchSize × gradAccum sequences (as `npm run plan`), split into
 * --micro-batches M (default gradAccum) micro-batches over dp (src/parallel/run/run.ts).
 *
 * trace.json: every rank's sends, receives and collectives plus one `step N` span per step on
 * the wall clock; the simulated clock prices only the messages (α-β on --net, free without
 * it) — a step span includes its waits for peers, so it is not charged to the simulated clock.
 * Spans are kept in memory until the end (at most 500 000 per rank, tracer's cap).
 */
import { type ParsedTrainArgs, type parseTrainArgs, trainHelp } from './args.ts';
import { isParallelArgv, parseCommandArgs } from './command.ts';
import { freshConfig, loadConfigFile } from './config_file.ts';
import { flagKeys, helpLines } from './flags.ts';
import { checkResumeOverrides, runFiles, truncateMetrics } from './run_dir.ts';
import { exists, sweepTempWrites, writeAtomic } from '../io/atomic.ts';
import { loadTrainingData } from '../io/corpus.ts';
import { loadCheckpointSet, parallelCheckpointFiles, saveCheckpointSet } from '../io/checkpoint_set.ts';
import { isCheckpointStep, keepsCheckpointFile } from '../train/checkpoint.ts';
import { resolveRewarm } from '../train/rewarm.ts';
import { parseConfig, type TrainConfig } from '../train/config.ts';
import type { Backend } from '../gpu/device.ts';
import { NetworkModel } from '../comm/network.ts';
import { describePlan, type ParallelPlan, planWorldSize } from '../parallel/plan/plan.ts';
import { planFromOptions, planRegionBytes, PlanSchema } from '../parallel/plan/plan_schema.ts';
import { MAX_RUN_WORLD } from '../parallel/plan/limits.ts';
import type { ParallelRunOptions } from '../experiments/common.ts';
import { parallelArgs } from './parallel_args.ts';
import type { DataPlane } from '../comm/data_plane.ts';
import { runParallel } from '../parallel/run/run_host.ts';
import { checkRun } from '../perf/measure.ts';
import { accounting } from '../perf/plan_report.ts';
import { checkLaunch, launchRecord, LaunchSchema, openRunWorld } from './run_world.ts';
import { stepReporter, writeAccounting } from './parallel_outputs.ts';
import { CliExit } from './main.ts';
import { SPLIT_ARCHS, type SplitDim } from '../parallel/plan/splits.ts';
import { resumeCommand, StopListener } from './stop.ts';
import { StepStop } from '../parallel/run/step_stop.ts';
import { launchedByMpi } from '../comm/mpi/world.ts';
import { abortJob } from '../comm/mpi/job.ts';

/** One line per split naming the architectures that take it (plan/splits.ts, the table the rules read). */
export const splitHelp = () =>
  (Object.keys(SPLIT_ARCHS) as SplitDim[]).map((d) => `  ${d.padEnd(4)}${SPLIT_ARCHS[d].archs.join(', ')}`).join('\n');

const HELP =
  `parallel flags (any of them makes a parallel run of dp·pp·cp·tp ≤ ${MAX_RUN_WORLD} ranks, one Deno worker + WebGPU device each;
dp, tp (+sp), pp, cp, ep (dividing dp) and zero combine (mesh trainer); the architectures each split takes:
${splitHelp()}
${helpLines(flagKeys(PlanSchema)).join('\n')}
launch (CLI only):
${helpLines(flagKeys(LaunchSchema)).join('\n')}
outputs: metrics.jsonl, trace.json, config.json, plan.txt, accounting.json, ckpt-parallel.json + ckpt-parallel-<step>/rank-<r>.safetensors
  --resume --out DIR           continues DIR's latest checkpoint; the parallel flags must be the checkpoint's plan
`;

/**
 * A fresh run's config (config_file.ts freshConfig, as every command's), or on --resume the saved config.json of --out
 * with the flags {@link RESUMABLE_KEYS} allows, and the latest checkpoint set.
 * @throws Error for --resume without --out or a checkpoint, flags that would change the saved
 *   config, LegacyCheckpointError for a set written before digests without --allow-legacy-checkpoint,
 *   and CorruptCheckpointError for a manifest or rank file that fails verification (loadCheckpointSet).
 */
async function resumeOrFresh(
  args: ReturnType<typeof parseTrainArgs>,
): Promise<{ cfg: TrainConfig; resume: Awaited<ReturnType<typeof loadCheckpointSet>> | null }> {
  if (!args.resume) return { cfg: await freshConfig(args), resume: null };
  if (!args.out) throw new Error('--resume needs --out DIR: the run directory to continue');
  if (args.resumeStep !== undefined) {
    throw new Error('--resume-step: parallel runs continue their latest checkpoint only');
  }
  const resume = await loadCheckpointSet(args.out, { allowLegacy: args.allowLegacyCheckpoint });
  // config.json's tokenizer is the config key (the run's kind); the rest of these are the run's, not config keys.
  const { plan: _p, worldSize: _w, net: _n, vocabSize: _v, transport: _x, commBackend: _b, ...saved } = JSON.parse(
    await Deno.readTextFile(runFiles(args.out).config),
  );
  const file = args.configFile === undefined ? undefined : await loadConfigFile(args.configFile);
  checkResumeOverrides({ ...args, file }, parseConfig(saved));
  return {
    cfg: resolveRewarm(parseConfig({ ...saved, ...file, ...args.overrides }), {
      step: resume.manifest.step,
      config: parseConfig(saved),
    }),
    resume,
  };
}

/**
 * The plan of a real run from the parsed PlanSchema flags (unvalidated against the model), as
 * `npm run plan` builds it. @throws Error when it exceeds {@link MAX_RUN_WORLD} ranks or the pipeline maximum.
 */
export function planFromFlags(options: Record<string, unknown>, cfg: TrainConfig): ParallelPlan {
  return planFromOptions(options, cfg, MAX_RUN_WORLD);
}

/**
 * Runs a parallel training run; returns the last validation loss (null when no rank could evaluate).
 * Under mpirun a rank's error, before its world is up or after, ends the whole job (comm/mpi/job.ts
 * `abortJob`): a rank that merely exited before MPI_Init would leave its peers waiting there.
 */
export async function main(argv: string[]): Promise<number | null> {
  const args = parseCommandArgs(argv, 'parallel');
  if (args.help) {
    console.log(`${trainHelp()}\n\n${HELP}`);
    return null;
  }
  if (args.options.transport !== 'mpi' || !launchedByMpi()) return await train(argv, args);
  try {
    return await train(argv, args);
  } catch (e) {
    if (e instanceof CliExit) throw e;
    return await abortJob(String((e as Error)?.message ?? e));
  }
}

/**
 * A parallel training run from typed options (an experiment's, through its context): the run
 * `npm run train` makes of the same flags over the tiny preset, on worker ranks; returns the last
 * validation loss (null when no rank could evaluate).
 * @throws Error from {@link parallelArgs} for options it refuses, and every error of the run.
 */
export async function trainParallel(o: ParallelRunOptions): Promise<number | null> {
  const { argv, args } = parallelArgs(o);
  return await train(argv, args);
}

/** The run itself (see {@link main}), from the parsed flags; `argv` is repeated by the resume and mpirun commands it prints. */
async function train(argv: string[], args: ParsedTrainArgs): Promise<number | null> {
  const { cfg, resume } = await resumeOrFresh(args);
  const plan = planFromFlags(args.options, cfg);
  if (resume && JSON.stringify(resume.manifest.plan) !== JSON.stringify(plan)) {
    throw new Error(
      `--resume: the checkpoint was written by '${describePlan(resume.manifest.plan)}', the flags ask for '${
        describePlan(plan)
      }'; pass the checkpoint's parallel flags (rank files are not resharded)`,
    );
  }
  const netText = args.options.net as string | undefined;
  const net = netText ? NetworkModel.parse(netText) : null;
  const { tokenizer, data, texts } = await loadTrainingData(cfg);
  if (texts.length !== 1) {
    throw new Error(`parallel runs train on one data file for now; got a mixture of ${texts.length} (${cfg.data})`);
  }
  const { model, kind } = checkRun(plan, cfg, tokenizer.vocabSize);
  const launch = LaunchSchema.parse(args.options);
  checkLaunch(launch);
  const tokens = tokenizer.encode(texts[0]), size = planWorldSize(plan);
  const outDir = args.out ??
    `runs/parallel-${new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15)}`;
  const files = runFiles(outDir), enc = new TextEncoder();
  if (!resume && await exists(parallelCheckpointFiles(outDir).manifest)) {
    throw new Error(
      `${outDir} already holds a parallel checkpoint: pass --resume to continue it, or choose another --out`,
    );
  }
  // Listening before the launch: a signal while the world starts stops the run at its first step
  // boundary. Under MPI, mpirun delivers a signal to every process and the default ends the job.
  const stop = launch.transport === 'workers' ? new StepStop() : undefined;
  const stopper = stop ? new StopListener(() => stop.request()) : null;
  // Under MPI every process runs this host loop (comm/mpi/task_world.ts); rank 0 alone prints and writes.
  const plane = {
    dataPlane: args.options.dataPlane as DataPlane | undefined,
    regionBytes: planRegionBytes(plan, model, args.options.regionMb as number | undefined),
  };
  const rw = await openRunWorld(
    launch,
    plan,
    net,
    `mpirun -pmi-port -n ${size} npm run train -- ${argv.join(' ')}`,
    plane,
  );
  const say = rw.primary ? console.log : () => {};
  let valLoss: number | null = null;
  try {
    if (rw.primary) {
      await sweepTempWrites(outDir); // left by a writer killed mid-write
      await Deno.mkdir(outDir, { recursive: true });
      const saved = { ...cfg, plan, worldSize: size, net: net?.toString() ?? null, ...launchRecord(launch) };
      await writeAtomic(
        files.config,
        enc.encode(
          JSON.stringify({ ...saved, tokenizer: tokenizer.kind, vocabSize: tokenizer.vocabSize }, null, 2) + '\n',
        ),
      );
      if (resume) await truncateMetrics(files.metrics, resume.manifest.step);
    }
    say(
      `plan: ${describePlan(plan)} · ${kind} trainer · ${cfg.arch} · vocab ${tokenizer.vocabSize} (${tokenizer.kind})` +
        (launch.transport === 'mpi' ? ` · ${size} MPI processes · collectives: ${launch.commBackend}` : ''),
    );
    if (rw.planeLine) say(rw.planeLine);
    say(
      `data: ${cfg.data} · ${data.trainTokens} train / ${data.valTokens} val tokens · run: ${outDir}${
        resume ? ` · resuming at step ${resume.manifest.step}` : ''
      }`,
    );
    const metrics = rw.primary
      ? await Deno.open(
        files.metrics,
        resume ? { append: true, create: true } : { write: true, create: true, truncate: true },
      )
      : null;
    const { steps, ranks, stoppedAt } = await runParallel(
      rw.world,
      plan,
      cfg,
      { tokens, vocabSize: tokenizer.vocabSize },
      stepReporter({
        write: (o) => metrics?.writeSync(enc.encode(JSON.stringify(o) + '\n')),
        say,
        cfg,
        size,
        onVal: (v) => (valLoss = v),
      }),
      {
        backend: args.gpu as Backend,
        adapter: args.adapter === 'local-rank' ? String(rw.localRank) : args.adapter,
        resume: resume ? { step: resume.manifest.step, shards: resume.shards } : undefined,
        stop,
        checkpoint: {
          where: outDir,
          at: (done) => isCheckpointStep(done, cfg.steps, cfg.ckptInterval, cfg.ckptSchedule),
          save: async (done, shards) => {
            if (!rw.primary) return;
            const keep = keepsCheckpointFile(done, cfg.steps, cfg.ckptInterval, cfg.ckptSchedule);
            await saveCheckpointSet(outDir, done, shards, plan, keep);
            say(
              `step ${String(done - 1).padStart(5)} | checkpoint: ${shards.length} rank files in ${outDir}/${
                parallelCheckpointFiles(outDir).dirAt(done)
              }/`,
            );
          },
        },
      },
    );
    metrics?.close();
    if (stoppedAt !== null) {
      say(
        `stopped by ${stopper!.signal} after step ${stoppedAt - 1} (${stoppedAt} steps done): checkpoint saved in ${
          parallelCheckpointFiles(outDir).manifest
        }`,
      );
      say(`resume with: ${resumeCommand(outDir, argv, (a) => isParallelArgv([a]))}`);
      throw new CliExit(stopper!.exitCode);
    }
    const trace = await rw.world.chromeTrace({ plan, net: net?.toString() ?? null, kind }); // collective under MPI
    const acc = accounting(plan, model, cfg, steps, ranks);
    if (rw.primary) {
      await writeAccounting(outDir, { plan, cfg, net, acc, trace, traced: launch.commBackend === 'ours' }, say);
    }
    if (valLoss === null) say(`(${kind} ranks hold shards only: training loss reported, no validation loss)`);
    say(
      `done: ${cfg.steps} steps on ${size} ranks · outputs in ${outDir}/ (metrics.jsonl, trace.json, config.json, plan.txt, accounting.json, ckpt-parallel.json)`,
    );
  } catch (e) {
    if (rw.abort && !(e instanceof CliExit)) await rw.abort(e); // no MPI rank may wait on a dead peer
    throw e;
  } finally {
    stopper?.dispose();
    await rw.close();
  }
  return valLoss;
}
