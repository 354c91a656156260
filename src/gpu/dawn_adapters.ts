/**
 * `--adapter NAME|INDEX`: which GPU a Deno process opens on a machine with several. WebGPU itself
 * only takes a power preference; Dawn (`npm:webgpu`) takes an `adapter=<name substring>` flag
 * and, given a name no adapter has, lists the adapters it found. An index is resolved through
 * that list. Deno's built-in wgpu and browsers choose their adapter themselves.
 */

/** One adapter Dawn found. */
export interface DawnAdapterName {
  backend: string;
  name: string;
}

/** A name no adapter has, to make Dawn list the ones it found. */
const PROBE = 'webgpu-sandbox-list-adapters';

/** Parses the ` * backend: 'vulkan', name: 'NVIDIA H200'` lines of Dawn's "no adapter" error. */
export function parseDawnAdapterList(message: string): DawnAdapterName[] {
  return [...message.matchAll(/\* backend: '([^']*)', name: '([^']*)'/g)].map((m) => ({ backend: m[1], name: m[2] }));
}

/**
 * The adapters Dawn finds with `create` and `flags` (its backend flag).
 * @throws Error when Dawn neither opens the probe name nor lists adapters.
 */
export async function listDawnAdapters(
  create: (flags: string[]) => GPU,
  flags: string[],
): Promise<DawnAdapterName[]> {
  try {
    const a = await create([...flags, `adapter=${PROBE}`]).requestAdapter();
    if (a) throw new Error(`an adapter matched the probe name '${PROBE}'`);
    return [];
  } catch (e) {
    return parseDawnAdapterList((e as Error).message);
  }
}

/**
 * The `adapter=` flag for `--adapter` `spec`: a name substring as given, or an index into Dawn's
 * list turned into that adapter's name.
 * @throws Error for an empty spec, or an index past the adapters found (listing them).
 */
export async function dawnAdapterFlag(
  spec: string,
  create: (flags: string[]) => GPU,
  flags: string[],
): Promise<string> {
  if (spec.trim() === '') {
    throw new Error('--adapter expects an adapter name (or part of one) or an index, got an empty value');
  }
  if (spec === 'local-rank') {
    throw new Error(
      '--adapter local-rank gives each MPI process the GPU of its node-local rank and needs --transport mpi',
    );
  }
  if (!/^\d+$/.test(spec)) return `adapter=${spec}`;
  const all = await listDawnAdapters(create, flags);
  const i = Number(spec);
  if (i >= all.length) {
    const names = all.map((a, k) => `${k}: ${a.name}`).join('; ') || 'none';
    throw new Error(`--adapter ${spec}: Dawn found ${all.length} adapter(s) (${names})`);
  }
  return `adapter=${all[i].name}`;
}
