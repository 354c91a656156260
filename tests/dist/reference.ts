/** The CPU reference of the collective tests lives in src/dist/scenarios.ts (shared with the browser page). */
export { as, diff, type DT, input, reduceRef } from '../../src/dist/scenarios.ts';
