/**
 * Setup's dataset choice: one of the corpora shipped under public/data, or a UTF-8 text file
 * the user picks or drops on the fieldset. The page hands the text to the rank worker(s); the
 * character vocabulary is built from it there (src/data/tokenizer.ts), as the CLI does.
 */

/** The corpora shipped with the demo (public/data/*.txt). */
export const SHIPPED: Record<string, string> = {
  tinyshakespeare: 'Tiny Shakespeare (1.1 MB)',
  warandpeace: 'War and Peace (3.2 MB)',
};

/** A corpus the page can train on. */
export interface Corpus {
  name: string;
  text: string;
}

/** The Data fieldset: shipped corpus or own file; {@link DatasetPicker.current} yields the text. */
export class DatasetPicker {
  private readonly select: HTMLSelectElement;
  private readonly file: HTMLInputElement;
  private readonly note: HTMLElement;
  private own: Corpus | null = null;
  private cache = new Map<string, Promise<string>>();

  /** Builds the fieldset inside `host`; `onChange` runs when the user picks another corpus. */
  constructor(host: HTMLElement, private readonly baseUrl: string, private readonly onChange: () => void) {
    const fs = document.createElement('fieldset');
    fs.className = 'dataset';
    fs.innerHTML = `<legend>Data</legend>
      <div class="field wide"><label for="dataset">Training text</label>
        <select id="dataset" data-testid="dataset">${Object.entries(SHIPPED).map(([k, v]) => `<option value="${k}">${v}</option>`).join('')}
        <option value="file">Your own text file…</option></select></div>
      <div class="field wide" data-slot="file" hidden><label for="dataset-file">UTF-8 text file (or drop one here)</label>
        <input id="dataset-file" type="file" accept=".txt,text/plain" data-testid="dataset-file" /></div>
      <div class="hint wide" data-testid="dataset-note"></div>`;
    host.append(fs);
    this.select = fs.querySelector('select')!;
    this.file = fs.querySelector('input')!;
    this.note = fs.querySelector('[data-testid="dataset-note"]')!;
    const fileField = fs.querySelector<HTMLElement>('[data-slot="file"]')!;
    this.select.addEventListener('change', () => {
      fileField.hidden = this.select.value !== 'file';
      if (this.select.value !== 'file' || this.own) this.onChange();
    });
    this.file.addEventListener('change', () => void this.take(this.file.files?.[0]));
    fs.addEventListener('dragover', (e) => e.preventDefault());
    fs.addEventListener('drop', (e) => {
      e.preventDefault();
      void this.take(e.dataTransfer?.files?.[0]);
    });
  }

  private async take(f: File | undefined): Promise<void> {
    if (!f) return;
    const text = await f.text();
    if (!text.length) {
      this.note.textContent = `${f.name} is empty: choose a file with some text.`;
      return;
    }
    this.own = { name: f.name, text };
    this.select.value = 'file';
    (this.file.closest('.field') as HTMLElement).hidden = false;
    this.onChange();
  }

  /** Shows what was loaded (characters and vocabulary) under the control. */
  describe(chars: number, vocab: number): void {
    this.note.textContent = `${chars.toLocaleString('en')} characters · vocabulary of ${vocab} characters`;
  }

  setDisabled(disabled: boolean): void {
    this.select.disabled = this.file.disabled = disabled;
  }

  /**
   * The chosen corpus (fetched once per shipped file).
   * @throws Error when the shipped file cannot be fetched or no own file was chosen yet.
   */
  async current(): Promise<Corpus> {
    const key = this.select.value;
    if (key === 'file') {
      if (!this.own) throw new Error('choose a text file first');
      return this.own;
    }
    if (!this.cache.has(key)) {
      const url = new URL(`${this.baseUrl}data/${key}.txt`, location.href).href;
      this.cache.set(key, fetch(url).then((r) => (r.ok ? r.text() : Promise.reject(new Error(`Cannot fetch ${url}: HTTP ${r.status}`)))));
    }
    try {
      return { name: SHIPPED[key], text: await this.cache.get(key)! };
    } catch (e) {
      this.cache.delete(key);
      throw e;
    }
  }
}
