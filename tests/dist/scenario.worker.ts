/**
 * Test-only rank worker: serves the shared scenario tasks (src/dist/scenarios.ts) — each runs
 * many collectives inside one world launch and checks every result on the rank itself — and
 * the single-collective tasks of src/dist/timing.ts (traces, timing).
 */
import { serveRank } from '../../src/dist/launch.ts';
import { SCENARIO_TASKS } from '../../src/dist/scenarios.ts';
import { TIMING_TASKS } from '../../src/dist/timing.ts';

serveRank({ ...SCENARIO_TASKS, ...TIMING_TASKS });
