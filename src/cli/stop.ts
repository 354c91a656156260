/**
 * Graceful stop of a training run. The first SIGINT (Ctrl-C) or SIGTERM asks the run to stop
 * at the next step boundary: it finishes the step, saves a checkpoint, prints the command that
 * resumes it and exits with 128 + the signal number (130, 143). A second signal exits at once:
 * checkpoint writes are atomic (temp file + rename), so whatever was being written is dropped
 * (its temp file removed) and the last good checkpoint stays as it was.
 */
import { removeInFlightWrites } from '../io/atomic.ts';
import { exitProcess } from './exit.ts';

/** The signals a run stops on, and the exit status of a run they stopped (128 + signal number). */
export const STOP_SIGNALS = { SIGINT: 130, SIGTERM: 143 } as const;
export type StopSignal = keyof typeof STOP_SIGNALS;

/** Listens for {@link STOP_SIGNALS} while a run trains. */
export class StopListener {
  /** The first signal received, or null. */
  signal: StopSignal | null = null;
  private readonly handlers: [StopSignal, () => void][] = [];

  /**
   * Starts listening. `onRequest` runs on the first signal (e.g. to tell rank workers); a
   * second signal exits the process at once.
   */
  constructor(onRequest?: (signal: StopSignal) => void) {
    for (const sig of Object.keys(STOP_SIGNALS) as StopSignal[]) {
      const h = () => {
        if (this.signal) {
          console.error(`\n${sig} again: exiting now; the last good checkpoint is untouched`);
          removeInFlightWrites();
          exitProcess(STOP_SIGNALS[sig]);
        }
        this.signal = sig;
        console.error(
          `\n${sig}: stopping after the current step and saving a checkpoint (${
            sig === 'SIGINT' ? 'Ctrl-C' : sig
          } again to exit at once)`,
        );
        onRequest?.(sig);
      };
      Deno.addSignalListener(sig, h);
      this.handlers.push([sig, h]);
    }
  }

  get requested(): boolean {
    return this.signal !== null;
  }

  /** The exit status for the signal received (1 when none). */
  get exitCode(): number {
    return this.signal ? STOP_SIGNALS[this.signal] : 1;
  }

  /** Stops listening (signals then have their default effect again). */
  dispose(): void {
    for (const [sig, h] of this.handlers.splice(0)) Deno.removeSignalListener(sig, h);
  }
}

/**
 * Lets pending macrotasks — signal listeners among them — run between steps that never await.
 * A message to ourselves rather than `setTimeout(0)`: timers nested this deep are clamped to
 * milliseconds (≈2 ms per step measured here), a message costs microseconds. The channel is
 * opened per call and closed at once, so it never keeps the process alive.
 */
export function yieldToEvents(): Promise<void> {
  const { port1, port2 } = new MessageChannel();
  return new Promise((resolve) => {
    port1.onmessage = () => {
      port1.close();
      resolve();
    };
    port2.postMessage(null);
    port2.close();
  });
}

const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`);

/**
 * The command that continues the run in `outDir`: `npm run train -- --out DIR --resume` plus
 * the tokens of `argv` that `keep` selects (a parallel run's plan flags, with their values).
 */
export function resumeCommand(
  outDir: string,
  argv: string[] = [],
  keep: (flag: string) => boolean = () => false,
): string {
  const extra: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--') || !keep(a)) continue;
    extra.push(quote(a));
    if (!a.includes('=') && i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      extra.push(quote(argv[++i]));
    }
  }
  return ['npm run train -- --out', quote(outDir), '--resume', ...extra].join(' ');
}
