/**
 * The config of a fresh run, shared by `npm run train` (single-rank and parallel),
 * `npm run plan` and `npm run schedule`: the preset, then the --config file, then the flags.
 * On --resume of a single-rank run, the checkpoint's config plus the --config file and flags, which
 * may change only what a resume may change ({@link resolveConfig}, shared by `npm run train` and
 * `npm run schedule`).
 */
import { archDefaults, parseConfig, PRESETS, type TrainConfig, TrainConfigSchema } from '../train/config.ts';
import { resolveRewarm } from '../train/rewarm.ts';
import { type LoadedCheckpoint, parseCheckpoint } from '../train/checkpoint.ts';
import { checkBatchOrder } from '../data/dataset.ts';
import { exists } from '../io/atomic.ts';
import type { parseTrainArgs } from './args.ts';
import { firstIssue, issueText } from './flags.ts';
import { checkResumeOverrides, runFiles } from './run_dir.ts';

const kindOfJson = (
  v: unknown,
) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`);

/**
 * Reads a --config file: a JSON object of config keys (camelCase), each checked by its schema.
 * @throws Error naming the file: unreadable, malformed JSON, not an object (null, an array, a
 *   number…), an unknown key or a value out of range (naming the key).
 */
export async function loadConfigFile(path: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`--config ${path}: cannot read the file (${(e as Error).message})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new Error(`--config ${path}: malformed JSON (${(e as Error).message})`);
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new Error(
      `--config ${path} must hold a JSON object of config keys, e.g. {"nLayer": 4}; got ${kindOfJson(json)}`,
    );
  }
  const obj = json as Record<string, unknown>;
  const r = TrainConfigSchema.partial().strict().safeParse(obj);
  if (!r.success) {
    const byKey = new Map<string, string>();
    for (const issue of r.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        for (const k of issue.keys) byKey.set(k, `unknown key '${k}' (keys are the camelCase names of --help's flags)`);
      } else {
        const key = String(issue.path[0]);
        if (!byKey.has(key)) {
          byKey.set(
            key,
            issueText(
              key,
              obj[key],
              firstIssue(r.error.issues.filter((i) => i.path[0] === issue.path[0])),
            ),
          );
        }
      }
    }
    throw new Error(`--config ${path}: ${[...byKey.values()].join('; ')}`);
  }
  return obj;
}

/** What {@link freshConfig} reads from the parsed flags. */
export interface ConfigSources {
  preset: string;
  configFile?: string;
  overrides: Record<string, unknown>;
}

/**
 * The config of a new run: the preset, then the --config file, then the flags, over the
 * architecture's own defaults where the schema's would not run (archDefaults). A re-warm
 * schedule starts fresh: its −1 placeholders become step 0 and LR 0 (see resolveRewarm).
 * @throws Error when the config file is bad ({@link loadConfigFile}) or the result is an invalid config.
 */
export async function freshConfig(args: ConfigSources): Promise<TrainConfig> {
  const file = args.configFile === undefined ? {} : await loadConfigFile(args.configFile);
  const given = { ...PRESETS[args.preset], ...file, ...args.overrides };
  return resolveRewarm(parseConfig({ ...archDefaults(given), ...given }), null);
}

/**
 * The run's config: preset + file + flags, or on --resume the checkpoint's config plus file and
 * flags, which may repeat any saved value but change only RESUMABLE_KEYS (checkResumeOverrides).
 * @throws Error for --resume without --out or a checkpoint, flags that would change the saved
 *   config, or a checkpoint of another batch order that drew other rows (dataset.ts checkBatchOrder); LegacyCheckpointError for a checkpoint
 *   written before whole-file digests without --allow-legacy-checkpoint; CorruptCheckpointError
 *   for one that fails verification (parseCheckpoint).
 */
export async function resolveConfig(
  args: ReturnType<typeof parseTrainArgs>,
  outDir: string,
): Promise<{ cfg: TrainConfig; ckpt: LoadedCheckpoint | null }> {
  const files = runFiles(outDir);
  if (args.resume) {
    if (!args.out) throw new Error('--resume needs --out DIR: the run directory to continue');
    const path = args.resumeStep === undefined ? files.checkpoint : files.checkpointAt(args.resumeStep);
    if (!(await exists(path))) throw new Error(`--resume: no checkpoint at ${path}`);
    const ckpt = await parseCheckpoint(await Deno.readFile(path), path, { allowLegacy: args.allowLegacyCheckpoint });
    if (ckpt.legacy) {
      console.log(
        `${path}: legacy checkpoint, its data_sha256 verified; the next checkpoint is written with the whole-file sha256`,
      );
    }
    const file = args.configFile === undefined ? undefined : await loadConfigFile(args.configFile);
    const saved = parseConfig(ckpt.state.config);
    checkResumeOverrides({ ...args, file }, saved);
    checkBatchOrder(ckpt.state.batchOrder, saved.gradAccum, path);
    return {
      cfg: resolveRewarm(parseConfig({ ...ckpt.state.config, ...file, ...args.overrides }), {
        step: ckpt.state.step,
        config: ckpt.state.config,
      }),
      ckpt,
    };
  }
  if (await exists(files.checkpoint)) {
    throw new Error(`${outDir} already holds a checkpoint: pass --resume to continue it, or choose another --out`);
  }
  return { cfg: await freshConfig(args), ckpt: null };
}
