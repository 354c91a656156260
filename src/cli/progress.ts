/** A one-line progress bar with ETA, drawn on stderr only when it is a terminal. */
export class Progress {
  private readonly tty = Deno.stderr.isTerminal();
  private readonly t0 = performance.now();
  constructor(private readonly total: number, private readonly start = 0) {}

  update(done: number): void {
    if (!this.tty) return;
    const frac = Math.min(1, done / this.total);
    const width = 30;
    const fill = Math.round(frac * width);
    const elapsed = (performance.now() - this.t0) / 1000;
    const rate = (done - this.start) / Math.max(elapsed, 1e-9);
    const eta = rate > 0 ? (this.total - done) / rate : 0;
    const line = `[${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${done}/${this.total} ${
      (frac * 100).toFixed(0)
    }% ETA ${fmt(eta)}`;
    Deno.stderr.writeSync(new TextEncoder().encode(`\r${line}\x1b[K`));
  }

  /** Clears the bar so a log line can be printed. */
  clear(): void {
    if (this.tty) Deno.stderr.writeSync(new TextEncoder().encode('\r\x1b[K'));
  }
}

function fmt(s: number): string {
  if (!Number.isFinite(s)) return '--:--';
  const m = Math.floor(s / 60);
  return `${m}:${String(Math.round(s % 60)).padStart(2, '0')}`;
}
