/**
 * README.md is a tour: short, every guide it names exists and is named, every link of every guide
 * lands, and every command the README quotes in its text is one the guides' shell blocks give, so
 * tests/cli/doc_commands*.test.ts run it as written.
 */
import { deepEqual, equal, ok } from 'node:assert/strict';
import { documentedCommands, guideFiles } from '../util/doc_commands.ts';
import {
  brokenDesignCitations,
  brokenLinks,
  citingFiles,
  designCitations,
  headingAnchors,
  markdownLinks,
  quotedCommands,
} from '../util/doc_links.ts';

const root = new URL('../../', import.meta.url).pathname;
const README = await Deno.readTextFile(`${root}README.md`);
/** The README's length limit, in lines after `deno fmt`: its first screens are the tour, the rest is in docs/. */
const MAX_README_LINES = 300;

Deno.test(`README.md is at most ${MAX_README_LINES} lines`, () => {
  const lines = README.trimEnd().split('\n').length;
  ok(lines <= MAX_README_LINES, `README.md has ${lines} lines; move the detail into a guide in docs/`);
});

Deno.test('every relative link of README.md and docs/*.md lands on a file, and on a heading when it names one', async () => {
  const broken: string[] = [];
  for (const file of await guideFiles()) {
    broken.push(...await brokenLinks(root, file, await Deno.readTextFile(`${root}${file}`)));
  }
  deepEqual(broken, []);
});

Deno.test('README.md links every guide in docs/', async () => {
  const linked = new Set(markdownLinks(README).map((l) => l.split('#')[0]));
  const guides = (await guideFiles()).filter((f) => f !== 'README.md');
  ok(guides.length > 0);
  deepEqual(guides.filter((g) => !linked.has(g)), [], 'guides the README does not link');
});

Deno.test('every command README.md quotes in its text is a command of a shell block, so it runs as written', async () => {
  const documented = new Set((await documentedCommands()).map((c) => c.command.trim()));
  const quoted = quotedCommands(README);
  ok(quoted.length >= 10, `the tour quotes one command per topic; found ${quoted.length}`);
  deepEqual(quoted.filter((c) => !documented.has(c)), [], 'quoted commands no shell block gives');
});

Deno.test('the link checks fail: a missing file, a missing anchor; code is not read as a link or a quote', async () => {
  const md = [
    '# A guide',
    '## Over MPI: one rank per process',
    '## Over MPI: one rank per process',
    'See [a](docs/nowhere.md), [b](README.md#no-such-heading), [c](#over-mpi-one-rank-per-process-1), [d](https://x.y).',
    'Run `npm run train -- --steps 2` or `npm test`; `[e](gone.md)` is code.',
    '```sh',
    '[f](gone.md) `npm run plan`',
    '```',
  ].join('\n');
  deepEqual(markdownLinks(md), [
    'docs/nowhere.md',
    'README.md#no-such-heading',
    '#over-mpi-one-rank-per-process-1',
    'https://x.y',
  ]);
  deepEqual(quotedCommands(md), ['npm run train -- --steps 2']);
  deepEqual([...headingAnchors(md)], ['a-guide', 'over-mpi-one-rank-per-process', 'over-mpi-one-rank-per-process-1']);
  const broken = await brokenLinks(root, 'G.md', md);
  equal(broken.length, 2, broken.join('\n'));
  ok(/no file docs\/nowhere\.md/.test(broken[0]), broken[0]);
  ok(/no heading with the anchor #no-such-heading in README\.md/.test(broken[1]), broken[1]);
  // A link from a guide in docs/ is read from docs/.
  deepEqual(await brokenLinks(root, 'docs/G.md', '[g](design.md) [h](../README.md#a-tour)'), []);
  deepEqual(await brokenLinks(root, 'docs/G.md', '[i](README.md)'), ['docs/G.md: README.md: no file docs/README.md']);
  equal(
    headingAnchors('## Choosing a plan: `plan --search` and `--advise` (see §29)').values().next().value,
    'choosing-a-plan-plan---search-and---advise-see-29',
  );
});

Deno.test('every heading of docs/design.md the code and the guides cite exists, and none is cited by a section number', async () => {
  const files = await Promise.all(
    (await citingFiles(root)).map(async (path) => ({ path, text: await Deno.readTextFile(`${root}${path}`) })),
  );
  // The scan must see the citations at all: source comments cite the design notes hundreds of times.
  const cited = files.flatMap((f) => designCitations(f.text).anchors);
  ok(cited.length > 300, `only ${cited.length} citations of design.md headings found; the scanner misses them`);
  ok(files.some((f) => f.path === 'src/models/model.ts') && files.some((f) => f.path === 'docs/training.md'));
  deepEqual(brokenDesignCitations(files, await Deno.readTextFile(`${root}docs/design.md`)), []);
});

Deno.test('the design citation check fails on an anchor no heading gives and on a section number', () => {
  const design = '# Design notes\n\n## Batch order\n\n```\n## Not a heading\n```\n';
  // Built from pieces, so that this file, which the check above reads too, cites nothing it tests.
  const md = 'design' + '.md', d = 'design';
  const files = [
    { path: 'src/a.ts', text: `/** Rows (docs/${md}#batch-order). */\nconst a = 1;\n// docs/${md}#not-a-heading` },
    { path: 'src/b.wgsl', text: `// one\n// see docs/${md} §16\n/**\n * (docs/${md}\n * §7) */` },
    { path: 'docs/g.md', text: `[x](${md}#batch-order), [y](${md}#batch-ordr), ${d} §3` },
  ];
  deepEqual(designCitations(files[1].text).numbered, [2, 4]);
  const number = 'cites docs/design.md by section number; link a heading (design.md#<anchor>)';
  deepEqual(brokenDesignCitations(files, design), [
    `src/a.ts:3: ${md}#not-a-heading names no heading of docs/design.md`,
    `src/b.wgsl:2: ${number}`,
    `src/b.wgsl:4: ${number}`,
    `docs/g.md:1: ${md}#batch-ordr names no heading of docs/design.md`,
    `docs/g.md:1: ${number}`,
  ]);
  // The valid citation alone passes.
  deepEqual(brokenDesignCitations([{ path: 'src/a.ts', text: files[0].text.split('\n')[0] }], design), []);
});
