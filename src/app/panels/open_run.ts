/**
 * Open run: loads a headless run's `metrics.jsonl`, `trace.json` and `config.json` (file picker,
 * drag and drop on the panel, or the example run shipped in public/example-run/) and hands them
 * to the page, which shows them in the same charts, timeline, communication, memory and mesh
 * panels as a live run.
 */
import type { Span } from '../../comm/trace.ts';
import { fromChromeTrace, type Metrics, parseMetricsJsonl } from './trace_io.ts';

/** What a load produced; any part may be missing. `meta` is the trace's otherData. */
export interface LoadedRun {
  name: string;
  metrics?: Metrics;
  spans?: Span[];
  meta?: Record<string, unknown>;
  /** The run's config.json (training config keys, plus `plan` and `vocabSize` for parallel runs). */
  config?: Record<string, unknown>;
}

/**
 * Sorts files by content: a JSON object with `traceEvents` is a trace, one with `nEmbd` a
 * config.json, anything else is read as JSON lines (metrics.jsonl).
 * @throws Error naming the file that is none of them.
 */
export async function readRunFiles(files: readonly File[]): Promise<LoadedRun> {
  const out: LoadedRun = { name: files.map((f) => f.name).join(' + ') };
  for (const f of files) {
    const text = await f.text();
    let json: unknown = undefined;
    try {
      json = JSON.parse(text);
    } catch { /* not one JSON document: JSON lines */ }
    if (json && typeof json === 'object' && 'traceEvents' in json) {
      out.spans = fromChromeTrace(json);
      out.meta = ((json as { otherData?: Record<string, unknown> }).otherData) ?? {};
    } else if (json && typeof json === 'object' && 'nEmbd' in json) {
      out.config = json as Record<string, unknown>;
    } else {
      try {
        out.metrics = parseMetricsJsonl(text);
      } catch (e) {
        throw new Error(`${f.name}: not a trace.json (Chrome Trace Event JSON), config.json or metrics.jsonl — ${(e as Error).message}`);
      }
    }
  }
  return out;
}

/** The Open run view: file picker, drop zone and example-run button; results go to `onLoad`. */
export class OpenRunPanel {
  private readonly status: HTMLElement;

  /** `exampleUrl`: folder of the shipped example run (public/example-run/). */
  constructor(host: HTMLElement, private readonly onLoad: (run: LoadedRun) => void, exampleUrl?: string) {
    host.innerHTML = `
      <p>Open the files of a headless run (<code>npm run train</code> writes <code>metrics.jsonl</code> and <code>config.json</code>;
      a parallel run, e.g. <code>npm run train -- --dp 2 --pp 2</code>, also <code>trace.json</code>) to see them in the Training,
      Timeline, Communication, Memory and Mesh panels.</p>
      <div class="drop" data-testid="drop-zone" tabindex="-1">
        <p>Drop metrics.jsonl, trace.json and config.json here, or</p>
        <label class="file-btn">Choose files…
          <input type="file" multiple accept=".json,.jsonl,application/json" data-testid="open-files" /></label>
        <button type="button" data-testid="open-example">Open the example run (dp 2 × pp 2, 4 steps)</button>
      </div>
      <p class="summary" data-testid="open-status" role="status"></p>`;
    this.status = host.querySelector('[data-testid="open-status"]')!;
    const input = host.querySelector<HTMLInputElement>('input[type=file]')!;
    input.addEventListener('change', () => {
      if (input.files?.length) void this.load([...input.files]);
      input.value = '';
    });
    const example = host.querySelector<HTMLButtonElement>('[data-testid="open-example"]')!;
    example.hidden = !exampleUrl;
    example.addEventListener('click', async () => {
      try {
        const files = await Promise.all(['metrics.jsonl', 'trace.json', 'config.json'].map(async (name) => {
          const res = await fetch(new URL(name, exampleUrl!));
          if (!res.ok) throw new Error(`${name}: HTTP ${res.status}`);
          return new File([await res.blob()], name);
        }));
        await this.load(files);
      } catch (e) {
        this.status.textContent = `Could not fetch the example run: ${(e as Error).message}`;
      }
    });
    const drop = host.querySelector<HTMLElement>('.drop')!;
    drop.addEventListener('dragover', (e) => {
      e.preventDefault();
      drop.classList.add('over');
    });
    drop.addEventListener('dragleave', () => drop.classList.remove('over'));
    drop.addEventListener('drop', (e) => {
      e.preventDefault();
      drop.classList.remove('over');
      const files = [...(e.dataTransfer?.files ?? [])];
      if (files.length) void this.load(files);
    });
  }

  /** Reads `files` and passes the run on; errors are shown, not thrown. */
  async load(files: File[]): Promise<void> {
    try {
      const run = await readRunFiles(files);
      this.onLoad(run);
      const parts = [
        run.metrics ? `${run.metrics.train.length} train steps, ${run.metrics.val.length} validation points` : '',
        run.spans ? `${run.spans.length} trace spans on ${new Set(run.spans.map((s) => s.rank)).size} ranks` : '',
        run.config ? 'the config' : '',
      ].filter(Boolean);
      this.status.textContent = `Loaded ${run.name}: ${parts.join(' · ')}.`;
      this.status.dataset.loaded = 'true';
    } catch (e) {
      this.status.textContent = `Could not open: ${(e as Error).message}`;
      this.status.dataset.loaded = 'false';
    }
  }
}
