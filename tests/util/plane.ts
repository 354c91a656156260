/**
 * DATA_PLANE=shared|message: every world a test does not give a plane runs on that plane (worker
 * and in-thread worlds alike, `planeDefaults` of src/comm/data_plane.ts), as GPU=dawn does for the
 * backend, so the parity suite can run on each plane. Imported by the test harnesses.
 */
import { DATA_PLANES, type DataPlane, planeDefaults } from '../../src/comm/data_plane.ts';

const plane = Deno.env.get('DATA_PLANE');
if (plane) {
  if (!DATA_PLANES.includes(plane as DataPlane)) {
    throw new Error(`DATA_PLANE=${plane}: the tests run on ${DATA_PLANES.join(' or ')}`);
  }
  planeDefaults.unnamed = plane as DataPlane;
}
