/** The commands of docs/parallel.md, run as written (tests/util/doc_rules.ts; doc_commands.test.ts says how). */
import { runShard } from '../util/doc_rules.ts';

Deno.test({
  name: 'docs: the commands of docs/parallel.md run as written (made small by added flags) and exit 0',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: (t) => runShard(t, 'parallel'),
});
