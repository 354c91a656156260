/**
 * The network model and the simulated clock
 * (docs/design.md#the-network-model-the-simulated-clock-and-collective-costs).
 *
 * A {@link NetworkModel} gives every pair of world ranks a link with latency α (µs) and
 * bandwidth β (GB/s = 10⁹ bytes/s), on two levels: ranks `⌊rank / node⌋` share a node and talk
 * over the intra-node link, other pairs over the inter-node link. A message of b bytes costs
 * α + b/β µs on its link (the Hockney / α-β model that MPICH's and NCCL's cost tables use).
 *
 * Each rank keeps a {@link SimClock} beside the wall clock. A send departs at the sender's
 * simulated time; messages a rank sends back to back on the same link class queue behind each
 * other (the link's egress is busy for b/β per message), so k concurrent messages share the
 * link's bandwidth: the last one finishes after k·b/β, as under fair sharing. The arrival time
 * travels in the message header; a receive moves the receiver's clock to max(own, arrival).
 * Compute advances the clock by its measured time or by FLOPs over a modelled peak.
 */

/** One link class: latency in µs, bandwidth in GB/s (10⁹ bytes per second). */
export interface LinkSpec {
  alphaUs: number;
  betaGBps: number;
}

/** Which link a pair of ranks uses. */
export type LinkKind = 'intra' | 'inter';

/** Parameters of a {@link NetworkModel}. */
export interface NetworkSpec {
  intra: LinkSpec;
  inter: LinkSpec;
  /** Ranks per node (consecutive world ranks share a node). */
  ranksPerNode: number;
  /** Modelled compute peak in GFLOP/s for `flops`-costed spans; absent: measured time is used. */
  peakGflops?: number;
}

/** Named machines: `nvlink-ib` (DGX-like: NVLink inside a node, InfiniBand between), `pcie-eth`, `ideal`. */
export const NET_PRESETS: Record<string, string> = {
  'nvlink-ib': 'intra=300GB/s,1us;inter=25GB/s,5us;node=8',
  'pcie-eth': 'intra=16GB/s,5us;inter=1.25GB/s,50us;node=4',
  ideal: 'intra=1000000GB/s,0us;inter=1000000GB/s,0us;node=1',
};

const SPEC_HELP = `expected 'intra=<β>GB/s,<α>us;inter=<β>GB/s,<α>us;node=<ranks>' ` +
  `(optional ';peak=<GFLOP/s>'; a flat network: 'link=<β>GB/s,<α>us') or a preset: ${
    Object.keys(NET_PRESETS).join(', ')
  }`;

function parseLink(text: string, what: string): LinkSpec {
  let alphaUs: number | undefined, betaGBps: number | undefined;
  for (const part of text.split(',').map((s) => s.trim())) {
    const m = /^([0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(GB\/s|MB\/s|Gb\/s|us|µs|ns|ms)$/i.exec(part);
    if (!m) {
      throw new Error(
        `network: '${part}' in ${what} is not a bandwidth (e.g. 25GB/s) or latency (e.g. 5us); ${SPEC_HELP}`,
      );
    }
    const v = Number(m[1]), unit = m[2];
    if (/\/s$/.test(unit)) {
      betaGBps = unit === 'GB/s' ? v : unit === 'MB/s' ? v / 1e3 : unit === 'Gb/s' ? v / 8 : NaN;
      if (!(betaGBps > 0)) throw new Error(`network: bandwidth in ${what} must be positive, got '${part}'`);
    } else alphaUs = unit === 'ns' ? v / 1e3 : unit === 'ms' ? v * 1e3 : v;
  }
  if (alphaUs === undefined || betaGBps === undefined) {
    throw new Error(`network: ${what} needs both a bandwidth and a latency, got '${text}'; ${SPEC_HELP}`);
  }
  return { alphaUs, betaGBps };
}

/**
 * Parses a network description: a preset name, or `intra=300GB/s,1us;inter=25GB/s,5us;node=4`
 * (units: GB/s, MB/s, Gb/s; us, µs, ns, ms; optional `peak=<GFLOP/s>`), or `link=…` for a
 * flat network. @throws Error naming the offending part and the accepted syntax.
 */
export function parseNetwork(text: string): NetworkSpec {
  const src = NET_PRESETS[text.trim()] ?? text;
  const fields = new Map<string, string>();
  for (const item of src.split(';').map((s) => s.trim()).filter(Boolean)) {
    const eq = item.indexOf('=');
    const key = item.slice(0, eq).trim();
    if (eq < 0 || !['intra', 'inter', 'node', 'link', 'peak'].includes(key)) {
      throw new Error(`network: unknown field '${item}'; ${SPEC_HELP}`);
    }
    if (fields.has(key)) throw new Error(`network: field '${key}' given twice`);
    fields.set(key, item.slice(eq + 1).trim());
  }
  if (!fields.size) throw new Error(`network: empty description; ${SPEC_HELP}`);
  let spec: NetworkSpec;
  if (fields.has('link')) {
    if (fields.has('intra') || fields.has('inter') || fields.has('node')) {
      throw new Error(`network: 'link' describes a flat network; do not combine it with intra/inter/node`);
    }
    const l = parseLink(fields.get('link')!, 'link');
    spec = { intra: l, inter: l, ranksPerNode: 1 };
  } else {
    for (const k of ['intra', 'inter', 'node']) {
      if (!fields.has(k)) throw new Error(`network: missing '${k}='; ${SPEC_HELP}`);
    }
    const node = /^\d+$/.test(fields.get('node')!) ? Number(fields.get('node')) : NaN; // digits only: '' and hex are no count
    if (!Number.isInteger(node) || node < 1) {
      throw new Error(`network: node must be a positive integer (ranks per node), got '${fields.get('node')}'`);
    }
    spec = {
      intra: parseLink(fields.get('intra')!, 'intra'),
      inter: parseLink(fields.get('inter')!, 'inter'),
      ranksPerNode: node,
    };
  }
  if (fields.has('peak')) {
    const m = /^([0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(?:GFLOP\/s)?$/i.exec(fields.get('peak')!);
    const peak = m ? Number(m[1]) : NaN;
    if (!(peak > 0)) throw new Error(`network: peak must be a positive GFLOP/s figure, got '${fields.get('peak')}'`);
    spec.peakGflops = peak;
  }
  return spec;
}

/** A two-level α-β network over world ranks. Construct from a spec or {@link NetworkModel.parse}. */
export class NetworkModel {
  readonly spec: NetworkSpec;

  constructor(spec: NetworkSpec) {
    for (const k of ['intra', 'inter'] as const) {
      const l = spec[k];
      if (!(l.alphaUs >= 0) || !(l.betaGBps > 0)) {
        throw new Error(`network: ${k} needs α ≥ 0 µs and β > 0 GB/s, got ${JSON.stringify(l)}`);
      }
    }
    if (!Number.isInteger(spec.ranksPerNode) || spec.ranksPerNode < 1) {
      throw new Error(`network: ranksPerNode must be a positive integer`);
    }
    this.spec = spec;
  }

  /** See {@link parseNetwork}. */
  static parse(text: string): NetworkModel {
    return new NetworkModel(parseNetwork(text));
  }

  /** A flat network (one link class). */
  static flat(betaGBps: number, alphaUs: number): NetworkModel {
    const l = { alphaUs, betaGBps };
    return new NetworkModel({ intra: l, inter: l, ranksPerNode: 1 });
  }

  /** `intra` when world ranks a and b share a node. */
  kind(a: number, b: number): LinkKind {
    const n = this.spec.ranksPerNode;
    return Math.floor(a / n) === Math.floor(b / n) ? 'intra' : 'inter';
  }

  /** The link between world ranks a and b. */
  link(a: number, b: number): LinkSpec {
    return this.spec[this.kind(a, b)];
  }

  /** Time on the wire of `bytes` over a link, µs (b/β, without α). */
  static wireUs(l: LinkSpec, bytes: number): number {
    return bytes / (l.betaGBps * 1e3);
  }

  /** `intra=…;inter=…;node=…` text that {@link parseNetwork} reads back. */
  toString(): string {
    const f = (l: LinkSpec) => `${l.betaGBps}GB/s,${l.alphaUs}us`;
    const s = this.spec;
    return `intra=${f(s.intra)};inter=${f(s.inter)};node=${s.ranksPerNode}${
      s.peakGflops ? `;peak=${s.peakGflops}` : ''
    }`;
  }
}

/**
 * One rank's simulated time in µs. Without a network model messages are free and the clock
 * only moves by compute.
 */
export class SimClock {
  /** Current simulated time, µs. */
  now = 0;
  private readonly egressFree: Record<LinkKind, number> = { intra: 0, inter: 0 };

  constructor(readonly rank: number, public net: NetworkModel | null = null) {}

  /** Simulated arrival (µs) of `bytes` sent now to world rank `dst`; books the egress link. */
  send(dst: number, bytes: number): number {
    if (!this.net) return this.now;
    const kind = this.net.kind(this.rank, dst), l = this.net.spec[kind];
    const depart = Math.max(this.now, this.egressFree[kind]);
    const wire = NetworkModel.wireUs(l, bytes);
    this.egressFree[kind] = depart + wire;
    return depart + l.alphaUs + wire;
  }

  /** A message that arrives at `arrivalUs` was received: the clock waits for it. */
  receive(arrivalUs: number): void {
    if (arrivalUs > this.now) this.now = arrivalUs;
  }

  /** Compute of `us` µs (measured), or of `flops` at the model's peak when it has one. */
  compute(us: number, flops?: number): void {
    const peak = this.net?.spec.peakGflops;
    this.now += flops !== undefined && peak ? flops / (peak * 1e3) : us;
  }

  /**
   * A second clock of this rank starting now, for collectives that run in the background (an
   * overlapped allReduce): their messages advance it instead of the rank's clock, which only
   * waits for it where the result is used. Its links are booked apart from this clock's.
   */
  fork(): SimClock {
    const c = new SimClock(this.rank, this.net);
    c.reset(this.now);
    return c;
  }

  /** Back to time 0 with idle links (between benchmark repetitions). */
  reset(now = 0): void {
    this.now = now;
    this.egressFree.intra = this.egressFree.inter = now;
  }
}
