/**
 * Test-only rank worker: serves the shared scenario tasks (src/comm/scenarios.ts) — each runs
 * many collectives inside one world launch and checks every result on the rank itself — and
 * the single-collective tasks of src/comm/timing.ts (traces, timing).
 */
import { serveRank } from '../../src/comm/launch.ts';
import { SCENARIO_TASKS } from '../../src/comm/scenarios.ts';
import { TIMING_TASKS } from '../../src/comm/timing.ts';

serveRank({ ...SCENARIO_TASKS, ...TIMING_TASKS });
