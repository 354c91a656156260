/**
 * Learn: ring allReduce step by step, replayed from a real run. "Run" launches a world of
 * browser rank workers, makes one traced ring allReduce (src/comm/algorithms.ts: p−1
 * reduce-scatter steps, then p−1 all-gather steps, one chunk to the right neighbour per step)
 * and replays its send spans in the order each rank sent them. Which chunk a message carries
 * follows the algorithm (reduce-scatter step s: rank r sends chunk r−s−1; all-gather step s:
 * chunk r−s, mod p); peers, bytes and times come from the trace, and a message whose peer is
 * not the right neighbour stops the replay with an error instead of drawing a wrong picture.
 */
import type { Span } from '../../comm/trace.ts';
import { fmtBytes } from './trace_io.ts';

/** One step of the replay: every rank's message of that step. */
export interface RingStep {
  phase: 'reduce-scatter' | 'all-gather';
  /** Step within its phase, 0-based. */
  index: number;
  messages: { from: number; to: number; chunk: number; span: Span }[];
}

const mod = (a: number, p: number) => ((a % p) + p) % p;

/**
 * Groups the send spans of one ring allReduce on `p` ranks into its 2(p−1) steps.
 * @throws Error when a rank did not send 2(p−1) messages or sent one to a rank other than r+1.
 */
export function ringSteps(spans: readonly Span[], p: number): RingStep[] {
  const byRank = [...Array(p).keys()].map((r) => spans.filter((s) => s.kind === 'send' && s.rank === r && s.op === 'allReduce').sort((a, b) => a.start - b.start || a.simStart - b.simStart));
  byRank.forEach((list, r) => {
    if (list.length !== 2 * (p - 1)) throw new Error(`rank ${r} sent ${list.length} allReduce messages; a ring allReduce on ${p} ranks sends 2(p−1) = ${2 * (p - 1)}`);
    const bad = list.find((s) => s.peer !== mod(r + 1, p));
    if (bad) throw new Error(`rank ${r} sent to rank ${bad.peer}; the ring sends to the right neighbour ${mod(r + 1, p)}`);
  });
  return [...Array(2 * (p - 1)).keys()].map((k) => {
    const rs = k < p - 1, s = rs ? k : k - (p - 1);
    return {
      phase: rs ? 'reduce-scatter' : 'all-gather',
      index: s,
      messages: byRank.map((list, r) => ({ from: r, to: mod(r + 1, p), chunk: mod(rs ? r - s - 1 : r - s, p), span: list[k] })),
    };
  });
}

/**
 * Which ranks' inputs each chunk of each rank holds after `upto` steps (sets of ranks):
 * a reduce-scatter receive adds the sender's partial sum to the receiver's chunk, an
 * all-gather receive overwrites it with the finished sum.
 */
export function ringState(steps: readonly RingStep[], p: number, upto: number): Set<number>[][] {
  let st = [...Array(p).keys()].map((r) => [...Array(p).keys()].map(() => new Set([r])));
  for (const step of steps.slice(0, upto)) {
    const next = st.map((row) => row.map((c) => new Set(c)));
    for (const m of step.messages) {
      next[m.to][m.chunk] = step.phase === 'reduce-scatter' ? new Set([...st[m.to][m.chunk], ...st[m.from][m.chunk]]) : new Set(st[m.from][m.chunk]);
    }
    st = next;
  }
  return st;
}

/** The ring allReduce lesson: runs a real traced call on demand and steps through its messages. */
export class RingLesson {
  private steps: RingStep[] = [];
  private p = 4;
  private at = 0;
  private readonly board: HTMLElement;
  private readonly caption: HTMLElement;
  private readonly buttons: Record<'prev' | 'next' | 'play', HTMLButtonElement>;
  private timer: ReturnType<typeof setInterval> | undefined;

  /** `run(p)` performs the real allReduce and resolves to its spans. */
  constructor(host: HTMLElement, private readonly run: (p: number) => Promise<Span[]>) {
    host.innerHTML = `
      <p>A ring allReduce sums a vector across ranks in two phases. <b>Reduce-scatter</b>: each rank splits its vector
      into p chunks and, p−1 times, passes one chunk to its right neighbour, which adds it to its own; afterwards each rank
      holds one chunk summed over everyone. <b>All-gather</b>: p−1 more passes hand the finished chunks around the ring.
      Every rank sends 2(p−1)/p of the vector — independent of p, which is why rings scale.</p>
      <div class="toolbar">
        <label>Ranks <select data-testid="ring-p"><option>2</option><option>3</option><option selected>4</option></select></label>
        <button type="button" class="primary" data-testid="ring-run">Run a traced allReduce</button>
        <button type="button" data-act="prev" disabled>◀ Step back</button>
        <button type="button" data-act="next" data-testid="ring-next" disabled>Step ▶</button>
        <button type="button" data-act="play" disabled>Play</button>
      </div>
      <p class="caption" data-testid="ring-caption" aria-live="polite">Press “Run a traced allReduce”: the workers run it, then you step through what they sent.</p>
      <div class="ring-board" data-testid="ring-board"></div>`;
    this.board = host.querySelector('.ring-board')!;
    this.caption = host.querySelector('.caption')!;
    const b = (a: string) => host.querySelector<HTMLButtonElement>(`[data-act="${a}"]`)!;
    this.buttons = { prev: b('prev'), next: b('next'), play: b('play') };
    const runBtn = host.querySelector<HTMLButtonElement>('[data-testid="ring-run"]')!;
    const pSel = host.querySelector<HTMLSelectElement>('select')!;
    runBtn.addEventListener('click', async () => {
      runBtn.disabled = true;
      this.caption.textContent = `Launching ${pSel.value} workers and running one ring allReduce…`;
      try {
        this.p = Number(pSel.value);
        this.steps = ringSteps(await this.run(this.p), this.p);
        this.go(0);
      } catch (e) {
        this.caption.textContent = `The run failed: ${(e as Error).message}`;
      } finally {
        runBtn.disabled = false;
      }
    });
    this.buttons.prev.addEventListener('click', () => this.go(this.at - 1));
    this.buttons.next.addEventListener('click', () => this.go(this.at + 1));
    this.buttons.play.addEventListener('click', () => this.play());
  }

  private play(): void {
    if (this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
      this.buttons.play.textContent = 'Play';
      return;
    }
    if (this.at >= this.steps.length) this.go(0);
    this.buttons.play.textContent = 'Pause';
    this.timer = setInterval(() => {
      if (this.at >= this.steps.length) return this.play();
      this.go(this.at + 1);
    }, 1100);
  }

  /** Shows the state after `k` steps (0 … 2(p−1)) and the messages of step k. */
  private go(k: number): void {
    const n = this.steps.length;
    this.at = Math.max(0, Math.min(n, k));
    this.buttons.prev.disabled = this.at === 0;
    this.buttons.next.disabled = this.at === n;
    this.buttons.play.disabled = !n;
    const p = this.p, st = ringState(this.steps, p, this.at), last = this.at ? this.steps[this.at - 1] : null;
    const moved = new Map(last?.messages.map((m) => [`${m.to}:${m.chunk}`, m]) ?? []);
    this.board.replaceChildren(...st.map((row, r) => {
      const box = document.createElement('div');
      box.className = 'ring-rank';
      const h = document.createElement('div');
      h.textContent = `rank ${r}`;
      box.append(h);
      row.forEach((set, c) => {
        const cell = document.createElement('div');
        cell.className = 'ring-chunk';
        cell.dataset.count = String(set.size);
        cell.style.background = `rgba(16, 185, 129, ${0.1 + (0.8 * (set.size - 1)) / Math.max(1, p - 1)})`;
        if (moved.has(`${r}:${c}`)) cell.classList.add('moved');
        cell.textContent = `chunk ${c}: ${[...set].sort().map((x) => `x${x}`).join('+')}`;
        box.append(cell);
      });
      return box;
    }));
    this.board.dataset.step = String(this.at);
    if (!last) {
      this.caption.textContent = `Before the call: rank r holds only its own vector x_r, split into ${p} chunks. ${n} steps follow.`;
      return;
    }
    const m0 = last.messages[0];
    const verb = last.phase === 'reduce-scatter' ? 'adds it to its own chunk' : 'stores the finished chunk';
    const msgs = last.messages.map((m) => `${m.from}→${m.to} chunk ${m.chunk}`).join(', ');
    const wall = Math.max(...last.messages.map((m) => m.span.start)) - Math.min(...last.messages.map((m) => m.span.start));
    this.caption.textContent = `Step ${this.at} of ${n} — ${last.phase} ${last.index + 1}/${p - 1}: every rank sends one chunk (${fmtBytes(m0.span.bytes)}) ` +
      `to its right neighbour, which ${verb}. Traced messages: ${msgs}; they left within ${wall.toFixed(2)} ms of each other` +
      (this.at === n ? '. Done: every rank holds the full sum in every chunk.' : '.');
  }
}
