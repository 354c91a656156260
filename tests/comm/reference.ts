/** The CPU reference of the collective tests lives in src/comm/scenarios.ts (shared with the browser page). */
export { as, diff, type DT, input, reduceRef } from '../../src/comm/scenarios.ts';
