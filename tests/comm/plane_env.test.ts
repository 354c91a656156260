/**
 * DATA_PLANE (tests/util/plane.ts) reaches every world that names no plane: in-thread worlds and
 * worker worlds take it, and a plane named by the caller still wins. Without the variable the
 * kinds keep their own defaults (in-thread: message; workers: shared where usable).
 */
import { equal } from 'node:assert/strict';
import '../util/plane.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { DEFAULT_REGION_BYTES } from '../../src/comm/data_plane.ts';
import { withWorld, WORKER_TEST } from './world.ts';

const env = Deno.env.get('DATA_PLANE');
/** A send larger than a ring is refused at once on the shared plane only (naming --region-mb). */
async function planeOf(w: ReturnType<typeof localWorld>): Promise<string> {
  try {
    await w[0].send(new Float32Array(DEFAULT_REGION_BYTES / 4), 1);
    return 'message';
  } catch (e) {
    if (!/--region-mb/.test((e as Error).message)) throw e;
    return 'shared';
  }
}

Deno.test('DATA_PLANE: an in-thread world that names no plane takes it; a named plane wins', async () => {
  for (const [named, want] of [[undefined, env ?? 'message'], ['message', 'message'], ['shared', 'shared']] as const) {
    const w = localWorld(2, { dataPlane: named });
    try {
      equal(await planeOf(w), want, `named ${named}`);
    } finally {
      closeLocalWorld(w);
    }
  }
});

Deno.test({
  name: 'DATA_PLANE: a worker world that names no plane takes it',
  ...WORKER_TEST,
  fn: async () => {
    await withWorld(2, (w) => {
      equal(w.dataPlane, env ?? 'shared');
      return Promise.resolve();
    });
  },
});
