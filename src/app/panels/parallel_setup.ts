/**
 * Setup additions for parallel runs: world size, then one control per key of the CLI's
 * `PlanSchema` (degrees, ep, ZeRO stage, sequence parallelism, micro-batches, pipeline schedule,
 * virtual stages, context-parallel kind, compression policy, network), each with the schema's
 * kind, default, choices, description and suggestions (plan_fields.ts). The network is picked
 * as a preset or composed from intra/inter-node bandwidth and latency. Validated on every edit
 * by the CLI's own `planFromOptions` and the plan's rules, `planProblems` (src/parallel/plan/rules.ts), so
 * the page shows exactly the CLI's messages before anything starts.
 */
import { NET_PRESETS } from '../../comm/network.ts';
import { describePlan, type PlanModel } from '../../parallel/plan/plan.ts';
import type { RunFacts } from '../../parallel/plan/rules.ts';
import { runFactsOf } from '../../parallel/plan/mesh_plan.ts';
import type { TrainConfig } from '../../train/config.ts';
import { sharedPlaneSupport } from '../../comm/data_plane.ts';
import { checkPlan, MAX_BROWSER_WORLD, type ParallelResult, type PlanField, planFields, planParamKey, type PlanValues } from './plan_fields.ts';

export type { ParallelChoice, ParallelResult } from './plan_fields.ts';

/** One control: a schema field, or the world size / network composition written here. */
interface Ctl {
  key: string;
  label: string;
  /** A select's values (`[value, text]`); none: a text input. */
  options?: [string, string][];
  init: string;
  hint?: string;
  numeric?: boolean;
  placeholder?: string;
  /** A text input's typical values (a datalist). */
  suggestions?: string[];
}

const FIELDS = planFields();

/** The data plane line of the Setup: what a run will use on this page, never a silent fallback. */
function planeLine(asked: string): string {
  const why = sharedPlaneSupport();
  if (asked === 'message') return 'data plane: message (MessagePorts), as chosen';
  if (!why) return 'data plane: shared (SharedArrayBuffer rings; the page is cross-origin isolated)';
  return asked === 'shared' ? `data plane: shared cannot run here: ${why}` : `data plane: message (MessagePorts), because ${why}`;
}

/** A schema field as a control: selects for enums, booleans and small ranges; hints from its description and bounds. */
function schemaCtl(f: PlanField): Ctl {
  const range = f.min !== undefined && f.max !== undefined && !f.options ? ` (${f.min}–${f.max})` : '';
  const options = f.options?.map((v): [string, string] => [v, f.kind === 'boolean' ? (v === 'true' ? 'on' : 'off') : v]);
  if (options && f.default === undefined) options.unshift(['', 'unset']);
  return {
    key: f.key, label: f.label, options, init: f.default ?? '', hint: f.help + range,
    numeric: f.kind === 'int' || f.kind === 'number', placeholder: f.default === undefined ? 'unset' : undefined,
    suggestions: f.suggestions,
  };
}

const NET = FIELDS.find((f) => f.key === 'net')!;
const PLAN_CTLS: Ctl[] = [
  { key: 'world', label: 'World size (ranks)', init: '1', numeric: true, hint: `must equal dp·pp·cp·tp; 1 trains in one worker (1–${MAX_BROWSER_WORLD})` },
  ...FIELDS.filter((f) => f.key !== 'net').map(schemaCtl),
];

/**
 * The network: the schema's `net` text, picked as a preset or composed from the custom fields.
 * The schema leaves it unset (no simulated message cost); the page's simulated clock needs one,
 * so it starts at the first preset.
 */
const NET_CTLS: Ctl[] = [
  { key: 'net', label: NET.label, options: [...Object.keys(NET_PRESETS), 'custom'].map((v) => [v, v]), init: Object.keys(NET_PRESETS)[0], hint: NET.help },
  { key: 'intraBw', label: 'Intra-node GB/s', init: '300' },
  { key: 'intraLat', label: 'Intra-node µs', init: '1' },
  { key: 'interBw', label: 'Inter-node GB/s', init: '25' },
  { key: 'interLat', label: 'Inter-node µs', init: '5' },
  { key: 'node', label: 'Ranks per node', init: '2', numeric: true },
];

/** The parallelism and network controls with inline plan validation. */
export class ParallelSetup {
  private readonly inputs = new Map<string, HTMLInputElement | HTMLSelectElement>();
  private readonly errors: HTMLElement;
  private readonly info: HTMLElement;
  /**
   * Which data plane a run will use here, and why when it is not the shared one
   * (docs/design.md#the-shared-data-plane-of-worker-ranks).
   */
  private readonly plane: HTMLElement;
  private model: PlanModel | null = null;
  private cfg: { gradAccum: number; run?: RunFacts } = { gradAccum: 1 };
  private last: ParallelResult = { ok: false, problems: ['no model yet'] };

  /** Builds the controls inside `host`; `onChange` runs after every validation. */
  constructor(host: HTMLElement, private readonly onChange: (r: ParallelResult) => void) {
    this.errors = document.createElement('div');
    this.errors.className = 'config-errors';
    this.errors.setAttribute('role', 'alert');
    this.errors.dataset.testid = 'plan-errors';
    this.errors.hidden = true;
    this.info = document.createElement('p');
    this.info.className = 'hint';
    this.info.dataset.testid = 'plan-info';
    this.plane = document.createElement('p');
    this.plane.className = 'hint';
    this.plane.dataset.testid = 'data-plane';
    // Problems show right under the degrees they concern, before the network model.
    host.append(this.group('Parallelism', PLAN_CTLS), this.errors, this.info, this.plane, this.group('Network model', NET_CTLS));
    host.addEventListener('input', () => this.validate());
    host.addEventListener('change', () => this.validate());
  }

  private group(legend: string, ctls: Ctl[]): HTMLFieldSetElement {
    const fs = document.createElement('fieldset');
    const lg = document.createElement('legend');
    lg.textContent = legend;
    fs.append(lg);
    for (const c of ctls) {
      const wrap = document.createElement('div');
      // A text with a datalist holds a whole policy: it gets the fieldset's full width.
      wrap.className = c.suggestions ? 'field wide' : 'field';
      const id = `p-${c.key}`;
      const label = document.createElement('label');
      label.htmlFor = id;
      label.textContent = c.label;
      let input: HTMLInputElement | HTMLSelectElement;
      if (c.options) {
        input = document.createElement('select');
        for (const [v, text] of c.options) {
          const o = document.createElement('option');
          o.value = v;
          o.textContent = text;
          input.append(o);
        }
      } else {
        input = document.createElement('input');
        input.type = 'text';
        input.inputMode = c.numeric ? 'numeric' : 'decimal';
        input.autocomplete = 'off';
        if (c.placeholder) input.placeholder = c.placeholder;
        if (c.suggestions) {
          // A datalist offers the typical values yet keeps the CLI's full syntax typeable.
          const list = document.createElement('datalist');
          list.id = `${id}-list`;
          for (const v of c.suggestions) list.append(Object.assign(document.createElement('option'), { value: v }));
          input.setAttribute('list', list.id);
          wrap.append(list);
        }
      }
      input.id = id;
      input.name = c.key;
      input.value = c.init;
      input.dataset.testid = `par-${c.key}`;
      wrap.append(label, input);
      if (c.hint) {
        const h = document.createElement('div');
        h.className = 'hint';
        h.id = `${id}-hint`;
        h.textContent = c.hint;
        input.setAttribute('aria-describedby', h.id);
        wrap.append(h);
      }
      this.inputs.set(c.key, input);
      fs.append(wrap);
    }
    return fs;
  }

  /**
   * The model the plan must fit and the config (its gradAccum: the micro-batches' default; the rest: what the plan's
   * rules read of a run), from the Setup form; revalidates.
   */
  setModel(model: PlanModel, cfg: TrainConfig): void {
    this.model = model;
    this.cfg = { gradAccum: cfg.gradAccum, run: runFactsOf(cfg) };
    const mb = this.inputs.get('microBatches');
    if (mb instanceof HTMLInputElement) mb.placeholder = `gradAccum (${cfg.gradAccum})`;
    this.validate();
  }

  /** Sets controls by key (values as typed; `schedule=gpipe` is the pipeline schedule) and validates; for URL parameters and tests. */
  set(values: Record<string, string | number | boolean>): void {
    for (const [k, v] of Object.entries(values)) {
      const i = this.inputs.get(planParamKey(k, String(v)));
      if (i) i.value = String(v);
    }
    this.validate();
  }

  /** Keys this panel understands (for routing URL parameters; with `value`, `schedule` is the pipeline's when it names a pipeline schedule). */
  has(key: string, value?: string): boolean {
    return this.inputs.has(planParamKey(key, value));
  }

  setDisabled(disabled: boolean): void {
    for (const i of this.inputs.values()) {
      if (i instanceof HTMLSelectElement) i.disabled = disabled;
      else i.readOnly = disabled;
    }
  }

  get result(): ParallelResult {
    return this.last;
  }

  private value(k: string): string {
    return this.inputs.get(k)!.value.trim();
  }

  /** The network text for parseNetwork from the controls. */
  private netText(): string {
    const preset = this.value('net');
    if (preset !== 'custom') return preset;
    return `intra=${this.value('intraBw')}GB/s,${this.value('intraLat')}us;inter=${this.value('interBw')}GB/s,${this.value('interLat')}us;node=${this.value('node')}`;
  }

  /** Reads the controls, builds the plan with planFromOptions, runs the plan's rules (planProblems), shows every problem. */
  validate(): ParallelResult {
    const custom = this.value('net') === 'custom';
    for (const k of ['intraBw', 'intraLat', 'interBw', 'interLat', 'node']) this.inputs.get(k)!.closest('.field')!.toggleAttribute('hidden', !custom);
    const values: PlanValues = { net: this.netText(), world: this.value('world') };
    for (const f of FIELDS) if (f.key !== 'net') values[f.key] = this.value(f.key);
    this.last = checkPlan(values, this.model, this.cfg);
    const problems = this.last.ok ? [] : this.last.problems;
    this.errors.hidden = !problems.length;
    this.errors.textContent = problems.length ? `invalid parallel plan: ${problems.join('; ')}` : '';
    this.info.textContent = this.last.ok ? describePlan(this.last.choice.plan) : '';
    this.plane.textContent = planeLine(this.value('dataPlane'));
    for (const [k, i] of this.inputs) {
      const name = k === 'world' ? 'world size' : k === 'ppSchedule' ? '(?:ppSchedule|schedule)' : k;
      const bad = problems.some((p) => new RegExp(`\\b${name}\\b`).test(p));
      if (bad) i.setAttribute('aria-invalid', 'true');
      else i.removeAttribute('aria-invalid');
    }
    this.onChange(this.last);
    return this.last;
  }
}
