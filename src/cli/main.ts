/**
 * The one way every `npm run <cli>` entry point ends: exit 0 when `main` resolves; otherwise one
 * `error: …` line on stderr (newlines folded, so a multi-rule message stays one line; the stack
 * too with DEBUG=1) and exit 1. Exiting explicitly also ends processes that Dawn would keep
 * alive; it skips the native exit handlers that race worker teardown (exit.ts, docs/design.md#runtime-quirks).
 */
import { DeviceLimitError } from '../gpu/limits.ts';
import { exitProcess } from './exit.ts';

/**
 * Ends a CLI with status `code` after it has said what happened itself (no `error:` line): a
 * run stopped by a signal exits 130 / 143 once its checkpoint is saved.
 */
export class CliExit extends Error {
  constructor(readonly code: number, message = `exit ${code}`) {
    super(message);
    this.name = 'CliExit';
  }
}

/** Runs `main(Deno.args)` and exits the process with its outcome. */
export async function runCli(main: (argv: string[]) => Promise<unknown>): Promise<never> {
  try {
    await main(Deno.args);
    exitProcess(0);
  } catch (e) {
    if (e instanceof CliExit) exitProcess(e.code);
    const err = e as Error;
    const hint = e instanceof DeviceLimitError ? ' (lower --batch-size or --block-size, or use a smaller model)' : '';
    console.error(`error: ${String(err.message).split('\n').join(' ')}${hint}`);
    if (Deno.env.get('DEBUG')) console.error(err.stack);
    exitProcess(1);
  }
}
