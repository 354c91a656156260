/**
 * `npm run train -- [flags]`: headless training on WebGPU (Deno's wgpu or Dawn).
 * Prints a nanoGPT-style line per log interval, writes the run directory (metrics.jsonl,
 * config.json, ckpt.safetensors written atomically) and ends with val loss and a sample.
 */
import { parseTrainArgs, trainHelp } from './args.ts';
import { runFiles, truncateMetrics } from './run_dir.ts';
import { sweepTempWrites, writeAtomic } from '../io/atomic.ts';
import { loadTrainingData } from '../io/corpus.ts';
import { Progress } from './progress.ts';
import { resolveConfig } from './config_file.ts';
import { isParallelArgv } from './command.ts';
import { isCheckpointStep, keepsCheckpointFile, loadIntoStore, saveCheckpoint } from '../train/checkpoint.ts';
import { type StepRecord, Trainer } from '../train/trainer.ts';
import { Gpu } from '../gpu/context.ts';
import type { Backend } from '../gpu/device.ts';
import { createModel } from '../models/registry.ts';
import { initFromGpt2 } from '../train/init_from.ts';
import { DeviceLostError } from '../gpu/lost.ts';
import { mixSeed, Random } from '../util/random.ts';
import { CliExit, runCli } from './main.ts';
import { checkState } from '../train/finite.ts';
import { type Stepper, TrainingLoop } from '../train/loop.ts';
import { depthMetric } from '../models/recurrence.ts';
import { resumeCommand, StopListener, yieldToEvents } from './stop.ts';

/** Environment variable of the device-loss fault injection (tests only): the step before which the device is destroyed. */
export const LOSE_DEVICE_ENV = 'WEBGPU_SANDBOX_LOSE_DEVICE_AT_STEP';

function stamp(): string {
  return new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
}

function fmtLine(step: number, loss: number, lr: number, ms: number, tps: number, mfu: number | null): string {
  return `step ${String(step).padStart(5)} | loss ${loss.toFixed(4)} | lr ${lr.toExponential(2)} | ${
    ms.toFixed(1)
  } ms/step | ${Math.round(tps)} tokens/s` +
    (mfu !== null ? ` | MFU ${(mfu * 100).toFixed(2)}%` : '');
}

/** One evaluation: the validation loss, and of a mixture each corpus's by name (else null). */
interface ValLoss {
  loss: number;
  bySource: Record<string, number> | null;
}

/** f16-mixed: the loss scale after a log interval's steps, and how many of them overflowed and were skipped. */
function scaleNote(recs: StepRecord[]): string {
  const last = recs[recs.length - 1];
  if (last.lossScale === undefined) return '';
  const skipped = recs.filter((r) => r.skipped).length;
  return ` | loss scale ${last.lossScale}` + (skipped ? ` (${skipped} overflowed: skipped, scale halved)` : '');
}

/** Runs the CLI; returns the final validation loss. */
export async function main(argv: string[]): Promise<number | null> {
  // Parallel flags (--dp, --tp, --pp, --cp, --ep, --zero, --sp, --net, …) run a world of rank workers: train_parallel.ts.
  if (isParallelArgv(argv)) return await (await import('./train_parallel.ts')).main(argv);
  const args = parseTrainArgs(argv);
  if (args.help) {
    console.log(trainHelp());
    return null;
  }
  const outDir = args.out ?? `runs/${args.preset}-${stamp()}`;
  const files = runFiles(outDir);
  const { cfg, ckpt } = await resolveConfig(args, outDir);
  const { tokenizer, data, texts } = await loadTrainingData(cfg, ckpt?.state.tokenizer ?? null);

  const gpu = await Gpu.create({
    backend: args.gpu as Backend,
    adapter: args.adapter,
    subgroups: args.subgroups,
    log: console.log,
  });
  let stopper: StopListener | null = null;
  try {
    const model = createModel(gpu, cfg, tokenizer.vocabSize);
    const trainer = new Trainer(gpu, model, data, cfg);
    let start = 0;
    let valLoss: number | null = null;
    const sampleRng = new Random(mixSeed(cfg.seed, 0x5a3d1e));
    if (ckpt) {
      loadIntoStore(
        model.params,
        ckpt,
        args.resumeStep === undefined ? files.checkpoint : files.checkpointAt(args.resumeStep),
      );
      start = ckpt.state.step;
      valLoss = ckpt.state.valLoss;
      sampleRng.state = ckpt.state.rngState;
      if (ckpt.state.lossScale) trainer.scaler?.load(ckpt.state.lossScale);
      await truncateMetrics(files.metrics, start);
    }
    if (args.initFrom) {
      await initFromGpt2(model.params, cfg, tokenizer.vocabSize, args.initFrom);
      console.log(`init: GPT-2 weights from ${args.initFrom}`);
    }
    await sweepTempWrites(outDir); // left by a writer killed mid-write
    await Deno.mkdir(outDir, { recursive: true });
    await writeAtomic(
      files.config,
      new TextEncoder().encode(
        JSON.stringify({ ...cfg, tokenizer: tokenizer.toJSON().kind, vocabSize: tokenizer.vocabSize }, null, 2) + '\n',
      ),
    );
    console.log(
      `model: ${model.describe()} · ${
        (model.numParams() / 1e6).toFixed(3)
      }M params · vocab ${tokenizer.vocabSize} (${tokenizer.kind})`,
    );
    await writeAtomic(
      files.data,
      new TextEncoder().encode(
        JSON.stringify({ spec: cfg.data, seed: cfg.seed, sources: data.describe() }, null, 2) + '\n',
      ),
    );
    console.log(
      `data: ${cfg.data} · ${data.trainTokens} train / ${data.valTokens} val tokens · run: ${outDir}${
        ckpt ? ` · resuming at step ${start}` : ''
      }`,
    );

    const tokensPerStep = cfg.batchSize * cfg.blockSize * cfg.gradAccum;
    const flopsPerStep = model.flopsPerToken(cfg.blockSize) * tokensPerStep;
    const progress = new Progress(cfg.steps, start);
    const metrics = await Deno.open(files.metrics, { append: true, create: true });
    const writeMetric = (o: Record<string, unknown>) =>
      void metrics.writeSync(new TextEncoder().encode(JSON.stringify(o) + '\n'));
    const writeCheckpoint = async (step: number): Promise<string | null> => {
      // Nothing non-finite or diverged is ever written over a good checkpoint (src/train/finite.ts).
      const why = await checkState(gpu, model.params.trainingState(), () => trainer.probe(step));
      if (why) return why;
      const bytes = await saveCheckpoint(model.params, {
        config: cfg,
        tokenizer: tokenizer.toJSON(),
        step,
        dataPosition: { seed: cfg.seed, step },
        rngState: sampleRng.state,
        valLoss,
        lossScale: trainer.scaler?.state(),
      });
      await writeAtomic(files.checkpoint, bytes);
      if (keepsCheckpointFile(step, cfg.steps, cfg.ckptInterval, cfg.ckptSchedule)) {
        await writeAtomic(files.checkpointAt(step), bytes);
      }
      return null;
    };
    const stop = (stopper = new StopListener());
    // Fault injection for the device-loss test (tests/cli/device_lost.test.ts): destroys the device before step N.
    const loseAt = Number(Deno.env.get(LOSE_DEVICE_ENV) ?? NaN);
    const stepper: Stepper<StepRecord, ValLoss> = {
      step: (s) => {
        if (s === loseAt) gpu.device.destroy();
        return trainer.step(s);
      },
      drain: () => trainer.drain(),
      evaluate: async () => {
        const loss = await trainer.evaluate('val');
        // A mixture also reports each corpus (forgetting vs adaptation in continual pre-training).
        const bySource = trainer.sourceNames.length > 1 ? await trainer.evaluateSources('val') : null;
        return { loss, bySource: bySource && Object.fromEntries(trainer.sourceNames.map((n, i) => [n, bySource[i]])) };
      },
      checkpoint: writeCheckpoint,
    };
    const loop = new TrainingLoop(stepper, {
      start,
      end: cfg.steps,
      logInterval: cfg.logInterval,
      evalInterval: cfg.evalInterval,
      checkpointAt: (done) => isCheckpointStep(done, cfg.steps, cfg.ckptInterval, cfg.ckptSchedule),
      shouldStop: () => stop.requested,
      lastGood: ckpt ? start : null,
      dir: outDir,
      hooks: {
        afterStep: yieldToEvents, // encoding never awaits between log lines: let a signal in
        record: (r, ms) =>
          writeMetric({
            step: r.step,
            loss: r.loss,
            lr: r.lr,
            grad_norm: r.gradNorm,
            ...depthMetric(cfg, r.step),
            ...(r.lossScale === undefined ? {} : { loss_scale: r.lossScale, skipped: r.skipped }),
            ms_per_step: ms,
            tokens_per_s: (tokensPerStep * 1000) / ms,
          }),
        log: (recs, ms) => {
          const r = recs[recs.length - 1];
          const mfu = cfg.peakTflops > 0 ? flopsPerStep / (ms / 1000) / (cfg.peakTflops * 1e12) : null;
          progress.clear();
          console.log(fmtLine(r.step, r.loss, r.lr, ms, (tokensPerStep * 1000) / ms, mfu) + scaleNote(recs));
        },
        eval: (step, e) => {
          valLoss = e.loss;
          const perSource = e.bySource ?? undefined;
          writeMetric({ step, val_loss: e.loss, ...(perSource ? { val_loss_by_source: perSource } : {}) });
          const extra = perSource
            ? ` (${Object.entries(perSource).map(([n, v]) => `${n} ${v.toFixed(4)}`).join(' · ')})`
            : '';
          console.log(`step ${String(step).padStart(5)} | val loss ${e.loss.toFixed(4)}${extra}`);
        },
        progress: (done) => progress.update(done),
      },
    });
    let ended;
    try {
      ended = await loop.run();
    } catch (e) {
      if (!(e instanceof DeviceLostError)) throw e;
      progress.clear();
      const kept = loop.lastGood !== null
        ? `the last checkpoint (step ${loop.lastGood}) in ${outDir} is kept: resume with: ${resumeCommand(outDir)}`
        : `no checkpoint was saved in ${outDir}`;
      throw new Error(`${e.message}; the run stopped; ${kept}`);
    }
    if (ended.stopped) {
      progress.clear();
      metrics.close();
      console.log(
        `stopped by ${stop.signal} after step ${
          ended.done - 1
        } (${ended.done} steps done): checkpoint saved in ${files.checkpoint}`,
      );
      console.log(`resume with: ${resumeCommand(outDir)}`);
      throw new CliExit(stop.exitCode);
    }
    progress.clear();
    metrics.close();
    const prompt = texts[0].includes('\n') ? tokenizer.encode('\n') : data.sources[0].val.subarray(0, 1);
    const sample = tokenizer.decode(await trainer.sample(prompt, cfg.sampleTokens, sampleRng));
    await writeAtomic(files.sample, new TextEncoder().encode(sample + '\n'));
    console.log(
      `\n---- sample (${cfg.sampleTokens} tokens, temperature ${cfg.temperature}, top-k ${cfg.topK}) ----\n${sample}\n----`,
    );
    console.log(
      `done: ${cfg.steps} steps · val loss ${
        valLoss?.toFixed(4)
      } · outputs in ${outDir}/ (metrics.jsonl, ckpt.safetensors, config.json, sample.txt)`,
    );
    return valLoss;
  } finally {
    stopper?.dispose();
    gpu.destroy();
  }
}

if (import.meta.main) await runCli(main);
