/**
 * Every command README.md and the guides in docs/ give, run as written: the shell blocks are read
 * out of the guides, each command is looked up in the table of tests/util/doc_rules.ts and run in
 * document order in a scratch copy of the project, made small only by flags added to it. A command
 * without an entry fails (say how it runs here, or why it cannot), as does an entry no guide gives
 * any more. The guides run in shards, one test file each (doc_commands_training.test.ts,
 * doc_commands_parallel.test.ts, and the rest here), so the parallel test runner overlaps them.
 */
import { ok } from 'node:assert/strict';
import { docCommands, documentedCommands, guideFiles, scratchProject } from '../util/doc_commands.ts';
import { RULES, runDocumented, runShard, SHARDS, TINY } from '../util/doc_rules.ts';

const root = new URL('../../', import.meta.url).pathname;

Deno.test({
  name: 'docs: every command in a shell block of README.md and docs/*.md has an entry, and every entry is documented',
  fn: async () => {
    const commands = await documentedCommands();
    const missing = commands.filter((c) => !(c.command in RULES)).map((c) => `${c.file}:${c.line}: ${c.command}`);
    ok(
      missing.length === 0,
      `documented commands with no entry in tests/util/doc_rules.ts RULES:\n${missing.join('\n')}`,
    );
    const documented = new Set(commands.map((c) => c.command));
    const stale = Object.keys(RULES).filter((k) => !documented.has(k));
    ok(stale.length === 0, `entries for commands no guide gives any more:\n${stale.join('\n')}`);
    // A command left to another test names a file that exists.
    for (const rule of Object.values(RULES)) if ('by' in rule) await Deno.stat(`${root}${rule.by}`);
    // A shard names guides that exist (else its test file would run nothing); `other` takes the rest.
    const guides = new Set(await guideFiles());
    const unknown = Object.values(SHARDS).flatMap((g) => g ?? []).filter((g) => !guides.has(g));
    ok(unknown.length === 0, `shards naming guides that do not exist: ${unknown.join(', ')}`);
  },
});

Deno.test({
  name: 'docs: the commands of every guide but README.md, training.md and parallel.md run as written and exit 0',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: (t) => runShard(t, 'other'),
});

Deno.test({
  name: 'docs: a broken documented command fails its check (an unknown flag, a missing file, a wrong expectation)',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await scratchProject();
    try {
      const md =
        '```sh\nnpm run train -- --no-such-flag  # broken\nnpm run export -- --from nowhere.safetensors\n```\n';
      const [bad, missing] = docCommands('BROKEN.md', md);
      const f1 = await runDocumented(bad.command, { add: TINY }, dir);
      ok(f1 && /exited 1/.test(f1) && /--no-such-flag/.test(f1), String(f1));
      const f2 = await runDocumented(missing.command, {}, dir);
      ok(f2 && /exited/.test(f2), String(f2));
      const f3 = await runDocumented('npm run train -- --help', { expect: /no such text/ }, dir);
      ok(f3 && /did not print/.test(f3), String(f3));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
