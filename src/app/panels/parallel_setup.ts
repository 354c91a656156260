/**
 * Setup additions for parallel runs: world size, the [dp, pp, cp, tp] degrees, ep, ZeRO stage,
 * pipeline schedule and micro-batches, sequence parallelism, context-parallel kind, and the
 * network model (a preset or intra/inter-node bandwidth and latency). Validated on every edit
 * with the trainer's own `planProblems` (src/parallel/plan.ts) and `parseNetwork`
 * (src/comm/network.ts), so the page shows exactly the CLI's messages before anything starts.
 */
import { NET_PRESETS, parseNetwork } from '../../comm/network.ts';
import { CP_KINDS, makePlan, type ParallelPlan, type PlanModel, planProblems, describePlan } from '../../parallel/plan.ts';
import { SCHEDULE_KINDS } from '../../parallel/pipeline_schedule.ts';

/** A plan that passed validation, with its world size and network description. */
export interface ParallelChoice {
  plan: ParallelPlan;
  worldSize: number;
  /** Text for parseNetwork: a preset name or `intra=…;inter=…;node=…`. */
  net: string;
}

export type ParallelResult = { ok: true; choice: ParallelChoice } | { ok: false; problems: string[] };

interface Ctl {
  key: string;
  label: string;
  kind: 'int' | 'choice' | 'bool' | 'text';
  choices?: readonly string[];
  init: string;
  hint?: string;
}

const PLAN_CTLS: Ctl[] = [
  { key: 'world', label: 'World size (ranks)', kind: 'int', init: '1', hint: 'must equal dp·pp·cp·tp; 1 trains in one worker' },
  { key: 'dp', label: 'dp (data)', kind: 'int', init: '1' },
  { key: 'pp', label: 'pp (pipeline)', kind: 'int', init: '1' },
  { key: 'cp', label: 'cp (context)', kind: 'int', init: '1' },
  { key: 'tp', label: 'tp (tensor)', kind: 'int', init: '1' },
  { key: 'ep', label: 'ep (experts)', kind: 'int', init: '1', hint: 'MoE models only' },
  { key: 'zero', label: 'ZeRO stage', kind: 'choice', choices: ['0', '1', '2', '3'], init: '0' },
  { key: 'schedule', label: 'Pipeline schedule', kind: 'choice', choices: SCHEDULE_KINDS, init: '1f1b' },
  { key: 'microBatches', label: 'Micro-batches', kind: 'int', init: '1' },
  { key: 'virtualStages', label: 'Virtual stages', kind: 'int', init: '1', hint: 'interleaved only' },
  { key: 'cpKind', label: 'Context parallel', kind: 'choice', choices: CP_KINDS, init: 'ring' },
  { key: 'sp', label: 'Sequence parallel', kind: 'bool', init: 'false' },
];

const NET_CTLS: Ctl[] = [
  { key: 'net', label: 'Network', kind: 'choice', choices: [...Object.keys(NET_PRESETS), 'custom'], init: 'nvlink-ib' },
  { key: 'intraBw', label: 'Intra-node GB/s', kind: 'text', init: '300' },
  { key: 'intraLat', label: 'Intra-node µs', kind: 'text', init: '1' },
  { key: 'interBw', label: 'Inter-node GB/s', kind: 'text', init: '25' },
  { key: 'interLat', label: 'Inter-node µs', kind: 'text', init: '5' },
  { key: 'node', label: 'Ranks per node', kind: 'int', init: '2' },
];

/** The parallelism and network controls with inline plan validation. */
export class ParallelSetup {
  private readonly inputs = new Map<string, HTMLInputElement | HTMLSelectElement>();
  private readonly errors: HTMLElement;
  private readonly info: HTMLElement;
  private model: PlanModel | null = null;
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
    // Problems show right under the degrees they concern, before the network model.
    host.append(this.group('Parallelism', PLAN_CTLS), this.errors, this.info, this.group('Network model', NET_CTLS));
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
      wrap.className = 'field';
      const id = `p-${c.key}`;
      const label = document.createElement('label');
      label.htmlFor = id;
      label.textContent = c.label;
      let input: HTMLInputElement | HTMLSelectElement;
      if (c.kind === 'choice' || c.kind === 'bool') {
        input = document.createElement('select');
        for (const v of c.kind === 'bool' ? ['false', 'true'] : c.choices!) {
          const o = document.createElement('option');
          o.value = v;
          o.textContent = c.kind === 'bool' ? (v === 'true' ? 'on' : 'off') : v;
          input.append(o);
        }
      } else {
        input = document.createElement('input');
        input.type = 'text';
        input.inputMode = c.kind === 'int' ? 'numeric' : 'decimal';
        input.autocomplete = 'off';
      }
      input.id = id;
      input.name = c.key;
      input.value = c.init;
      input.dataset.testid = `par-${c.key}`;
      wrap.append(label, input);
      if (c.hint) {
        const h = document.createElement('div');
        h.className = 'hint';
        h.textContent = c.hint;
        wrap.append(h);
      }
      this.inputs.set(c.key, input);
      fs.append(wrap);
    }
    return fs;
  }

  /** The model the plan must fit (from the Setup form); revalidates. */
  setModel(model: PlanModel): void {
    this.model = model;
    this.validate();
  }

  /** Sets controls by key (values as typed) and validates; for URL parameters and tests. */
  set(values: Record<string, string | number | boolean>): void {
    for (const [k, v] of Object.entries(values)) {
      const i = this.inputs.get(k);
      if (i) i.value = String(v);
    }
    this.validate();
  }

  /** Keys this panel understands (for routing URL parameters). */
  has(key: string): boolean {
    return this.inputs.has(key);
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

  /** Reads the controls, runs planProblems and parseNetwork, shows every problem. */
  validate(): ParallelResult {
    const custom = this.value('net') === 'custom';
    for (const k of ['intraBw', 'intraLat', 'interBw', 'interLat', 'node']) this.inputs.get(k)!.closest('.field')!.toggleAttribute('hidden', !custom);
    const n = (k: string) => (this.value(k) === '' ? NaN : Number(this.value(k)));
    const plan = makePlan({
      dp: n('dp'), pp: n('pp'), cp: n('cp'), tp: n('tp'), ep: n('ep'), zero: n('zero') as ParallelPlan['zero'],
      schedule: this.value('schedule') as ParallelPlan['schedule'], microBatches: n('microBatches'), virtualStages: n('virtualStages'),
      cpKind: this.value('cpKind') as ParallelPlan['cpKind'], sp: this.value('sp') === 'true',
    });
    const world = n('world');
    const problems: string[] = [];
    if (!Number.isInteger(world) || world < 1 || world > 16) problems.push(`world size must be a whole number from 1 to 16, got ${this.value('world') || 'nothing'}`);
    if (this.model) problems.push(...planProblems(plan, this.model, Number.isInteger(world) ? world : undefined));
    else problems.push('the model setup above is invalid');
    const net = this.netText();
    try {
      parseNetwork(net);
    } catch (e) {
      problems.push((e as Error).message);
    }
    this.last = problems.length ? { ok: false, problems } : { ok: true, choice: { plan, worldSize: world, net } };
    this.errors.hidden = !problems.length;
    this.errors.textContent = problems.length ? `invalid parallel plan: ${problems.join('; ')}` : '';
    this.info.textContent = problems.length ? '' : describePlan(plan);
    for (const [k, i] of this.inputs) {
      const bad = problems.some((p) => new RegExp(`\\b${k === 'world' ? 'world size' : k}\\b`).test(p));
      if (bad) i.setAttribute('aria-invalid', 'true');
      else i.removeAttribute('aria-invalid');
    }
    this.onChange(this.last);
    return this.last;
  }
}
