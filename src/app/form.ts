/**
 * The Setup form: a preset plus the fields a demo user changes most, validated on every edit
 * with the trainer's own `parseConfig` (src/train/config.ts), so the page and the CLI accept
 * exactly the same configs. Errors appear next to their field; Start stays disabled until the
 * config is valid.
 */
import { parseConfig, PRESETS, type TrainConfig } from '../train/config.ts';
import { choicesOf, type Field, FIELD_GROUPS, fieldErrorsOf, FIELDS, type Key, presetValues } from './form_fields.ts';

/** Result of validating the form. */
export type FormResult =
  | { ok: true; cfg: TrainConfig }
  | { ok: false; message: string; fieldErrors: Map<Key, string[]> };

export class SetupForm {
  private readonly inputs = new Map<Key, HTMLInputElement | HTMLSelectElement>();
  private readonly errors = new Map<Key, HTMLElement>();
  private readonly preset: HTMLSelectElement;
  private readonly summary: HTMLElement;
  private last: FormResult | null = null;

  /**
   * Builds the fields inside `root` (a <form> holding #preset and #config-errors).
   * `onChange` runs after each validation.
   */
  constructor(root: HTMLFormElement, private readonly onChange: (r: FormResult) => void) {
    this.preset = root.querySelector<HTMLSelectElement>('#preset')!;
    this.summary = root.querySelector<HTMLElement>('#config-errors')!;
    for (const name of Object.keys(PRESETS)) {
      const o = document.createElement('option');
      o.value = o.textContent = name;
      this.preset.append(o);
    }
    const host = root.querySelector<HTMLElement>('#fields')!;
    for (const g of FIELD_GROUPS) {
      const fs = document.createElement('fieldset');
      const lg = document.createElement('legend');
      lg.textContent = g.legend;
      fs.append(lg);
      for (const f of g.fields) fs.append(this.buildField(f));
      host.append(fs);
    }
    this.preset.addEventListener('change', () => this.applyPreset(this.preset.value));
    root.addEventListener('input', (ev) => {
      if (ev.target !== this.preset) this.validate();
    });
    // Selects fire 'change' (not always 'input') in some browsers.
    root.addEventListener('change', (ev) => {
      if (ev.target !== this.preset && ev.target instanceof HTMLSelectElement) this.validate();
    });
    this.applyPreset(this.preset.value || 'tiny');
  }

  private buildField(f: Field): HTMLElement {
    const wrap = document.createElement('div');
    wrap.className = 'field';
    const id = `f-${f.key}`;
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent = f.label;
    let input: HTMLInputElement | HTMLSelectElement;
    if (f.kind === 'choice') {
      input = document.createElement('select');
      for (const c of choicesOf(f.key)) {
        const o = document.createElement('option');
        o.value = o.textContent = c;
        input.append(o);
      }
    } else {
      input = document.createElement('input');
      input.type = 'text';
      input.inputMode = f.kind === 'int' ? 'numeric' : 'decimal';
      input.autocomplete = 'off';
      input.spellcheck = false;
    }
    input.id = id;
    input.name = f.key;
    input.dataset.testid = `field-${f.key}`;
    const err = document.createElement('div');
    err.className = 'field-error';
    err.id = `${id}-error`;
    err.dataset.testid = `error-${f.key}`;
    const describedBy = [err.id];
    if (f.hint) {
      const hint = document.createElement('div');
      hint.className = 'hint';
      hint.id = `${id}-hint`;
      hint.textContent = f.hint;
      describedBy.push(hint.id);
      wrap.append(label, input, hint, err);
    } else {
      wrap.append(label, input, err);
    }
    input.setAttribute('aria-describedby', describedBy.join(' '));
    this.inputs.set(f.key, input);
    this.errors.set(f.key, err);
    return wrap;
  }

  /** Fills every field with a preset's values and validates. */
  applyPreset(name: string): void {
    this.preset.value = name;
    const v = presetValues(name);
    for (const f of FIELDS) this.inputs.get(f.key)!.value = String(v[f.key]);
    this.validate();
  }

  /** Sets fields by key (values as typed) and validates; for URL parameters and tests. */
  set(values: Partial<Record<Key, string | number>>): void {
    for (const [k, val] of Object.entries(values)) {
      const input = this.inputs.get(k as Key);
      if (input && val !== undefined) input.value = String(val);
    }
    this.validate();
  }

  /** Disables or enables every control (while a run is in progress). */
  setDisabled(disabled: boolean): void {
    this.preset.disabled = disabled;
    for (const i of this.inputs.values()) {
      if (i instanceof HTMLSelectElement) i.disabled = disabled;
      else i.readOnly = disabled;
    }
  }

  get result(): FormResult {
    return this.last ?? this.validate();
  }

  /** Reads the fields, runs parseConfig on preset + fields, and shows the errors. */
  validate(): FormResult {
    const input: Record<string, unknown> = { ...PRESETS[this.preset.value] };
    const local = new Map<Key, string[]>();
    for (const f of FIELDS) {
      const raw = this.inputs.get(f.key)!.value.trim();
      if (f.kind === 'choice') {
        input[f.key] = raw;
        continue;
      }
      const n = raw === '' ? NaN : Number(raw);
      if (raw === '') local.set(f.key, ['required']);
      else if (!Number.isFinite(n)) local.set(f.key, [`'${raw}' is not a number`]);
      else if (f.kind === 'int' && !Number.isInteger(n)) local.set(f.key, ['must be a whole number']);
      input[f.key] = n;
    }
    let result: FormResult;
    if (local.size) {
      const message = [...local].map(([k, m]) => `${k}: ${m.join(', ')}`).join('; ');
      result = { ok: false, message: `Invalid config: ${message}`, fieldErrors: local };
    } else {
      try {
        result = { ok: true, cfg: parseConfig(input) };
      } catch (e) {
        const message = (e as Error).message;
        result = { ok: false, message, fieldErrors: fieldErrorsOf(message) };
        this.addHiddenErrors(input, result);
      }
    }
    this.show(result);
    this.last = result;
    this.onChange(result);
    return result;
  }

  /**
   * parseConfig checks cross-field rules (heads dividing width, minLr ≤ lr) only once every
   * value is in range. So that all problems show at once, the fields already in error are
   * replaced by the preset's values and parseConfig runs again, until it passes or finds nothing new.
   */
  private addHiddenErrors(input: Record<string, unknown>, r: FormResult & { ok: false }): void {
    const base = presetValues(this.preset.value);
    const probe = { ...input };
    for (let pass = 0; pass < 3; pass++) {
      for (const k of r.fieldErrors.keys()) probe[k] = base[k];
      try {
        parseConfig(probe);
        return;
      } catch (e) {
        const more = fieldErrorsOf((e as Error).message);
        const fresh = [...more].filter(([k]) => !r.fieldErrors.has(k));
        if (!fresh.length) return;
        for (const [k, m] of fresh) r.fieldErrors.set(k, m);
        r.message += `; ${(e as Error).message.replace(/^Invalid config:\s*/, '')}`;
      }
    }
  }

  private show(r: FormResult): void {
    for (const f of FIELDS) {
      const msgs = r.ok ? undefined : r.fieldErrors.get(f.key);
      const input = this.inputs.get(f.key)!;
      const err = this.errors.get(f.key)!;
      err.textContent = msgs ? msgs.join('; ') : '';
      if (msgs) input.setAttribute('aria-invalid', 'true');
      else input.removeAttribute('aria-invalid');
    }
    this.summary.textContent = r.ok ? '' : r.message;
    this.summary.hidden = r.ok;
  }
}
