/**
 * Accessible tabs (WAI-ARIA Authoring Practices "Tabs with manual activation" reduced to
 * automatic activation): a `role="tablist"` of buttons whose `aria-controls` name their panels.
 * Arrow keys, Home and End move between tabs; only the selected tab is in the Tab order.
 */
export class Tabs {
  private readonly tabs: HTMLButtonElement[];

  /** Wires the tabs inside `list`; `onShow(id)` runs when a tab's panel becomes visible. */
  constructor(list: HTMLElement, private readonly onShow: (panelId: string) => void = () => {}) {
    this.tabs = [...list.querySelectorAll<HTMLButtonElement>('[role="tab"]')];
    this.tabs.forEach((t, i) => {
      t.addEventListener('click', () => this.select(i));
      t.addEventListener('keydown', (e) => {
        const n = this.tabs.length;
        const j = e.key === 'ArrowRight' ? (i + 1) % n : e.key === 'ArrowLeft' ? (i + n - 1) % n : e.key === 'Home' ? 0 : e.key === 'End' ? n - 1 : -1;
        if (j < 0) return;
        e.preventDefault();
        this.select(j);
        this.tabs[j].focus();
      });
    });
    const initial = this.tabs.findIndex((t) => t.getAttribute('aria-selected') === 'true');
    this.select(Math.max(0, initial));
  }

  /** Shows the tab whose panel id is `panelId` (or index). */
  select(which: number | string): void {
    const i = typeof which === 'number' ? which : this.tabs.findIndex((t) => t.getAttribute('aria-controls') === which);
    if (i < 0) return;
    this.tabs.forEach((t, k) => {
      const on = k === i;
      t.setAttribute('aria-selected', String(on));
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')!)!.hidden = !on;
    });
    this.onShow(this.tabs[i].getAttribute('aria-controls')!);
  }
}
