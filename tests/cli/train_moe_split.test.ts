/**
 * `npm run train -- --arch gpt-moe --dp 2 --ep 2 --zero 2`, as a user runs it, against the
 * single-rank run (docs/design.md#moe-under-dp-and-zero): each rank routes its half of every
 * micro-batch as one token group with its own capacity, so the run drifts from the single rank
 * exactly when its groups keep or drop choices otherwise than one group would, and its log and
 * metrics.jsonl say how many per step. With room for every choice (capacity factor 4 = E/k) and
 * no load-balancing loss (a per-group statistic) nothing differs and the losses agree.
 */
import { equal, match, ok } from 'node:assert/strict';
import { lossSeries, runCli, TINY_RUN } from '../util/cli.ts';

const RUN = [...TINY_RUN, '--arch', 'gpt-moe', '--steps', '6', '--seed', '23', '--aux-loss-weight', '0'];
const SPLIT = ['--dp', '2', '--ep', '2', '--zero', '2'];
const opts = { sanitizeResources: false, sanitizeOps: false };

interface Routed {
  assignments: number;
  routed_differently: number;
  dropped_split: number;
  dropped_one_group: number;
}

/** Trains `flags` into a fresh directory: the losses, each step's `moe_routing` row (absent: none) and stdout. */
async function train(flags: string[]): Promise<{ losses: number[]; routed: (Routed | undefined)[]; stdout: string }> {
  const dir = await Deno.makeTempDir({ prefix: 'moe-split-' });
  try {
    const r = await runCli('train.ts', [...RUN, ...flags, '--out', dir]);
    equal(r.code, 0, `exit 0\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
    const rows = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
    const routed = rows.filter((o) => typeof o.loss === 'number').map((o) => o.moe_routing as Routed | undefined);
    return { losses: await lossSeries(`${dir}/metrics.jsonl`), routed, stdout: r.stdout };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const rel = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);

Deno.test({
  name:
    'train gpt-moe --dp 2 --ep 2 --zero 2: its log counts the choices routed differently; 0 → the single-rank losses',
  ...opts,
  fn: async () => {
    for (const [cf, binds] of [['4', false], ['1.25', true]] as const) {
      const flags = ['--capacity-factor', cf];
      const [one, two] = [await train(flags), await train([...flags, ...SPLIT])];
      equal(one.routed.filter((r) => r).length, 0, 'a single-rank run routes one group: nothing to count');
      equal(two.routed.length, 6);
      for (const [s, r] of two.routed.entries()) {
        ok(r, `step ${s}: moe_routing in metrics.jsonl`);
        // 1 MoE layer × 4 rows × 16 tokens × top-1.
        equal(r.assignments, 64, `step ${s}`);
        ok(r.routed_differently >= Math.abs(r.dropped_split - r.dropped_one_group), `step ${s}: ${JSON.stringify(r)}`);
        match(
          two.stdout,
          new RegExp(
            `^step +${s} \\| .* \\| moe: ${r.routed_differently}/64 choices routed differently than in one group`,
            'm',
          ),
        );
      }
      const first = two.routed.findIndex((r) => r!.routed_differently > 0);
      if (!binds) {
        equal(first, -1, `capacity factor ${cf}: every choice fits: ${JSON.stringify(two.routed)}`);
        two.losses.forEach((l, s) =>
          ok(rel(l, one.losses[s]) < 1e-6, `step ${s}: ${l} vs single rank ${one.losses[s]}`)
        );
      } else {
        ok(first >= 0, `capacity factor ${cf} binds on some step: ${JSON.stringify(two.routed)}`);
        for (let s = 0; s < first; s++) ok(rel(two.losses[s], one.losses[s]) < 1e-6, `step ${s} before any difference`);
        ok(
          two.losses.slice(first).some((l, i) => rel(l, one.losses[first + i]) > 1e-5),
          `the losses part from step ${first}: ${two.losses} vs ${one.losses}`,
        );
      }
    }
  },
});
