/**
 * Imports point down the layer order (docs/design.md#layers, tests/util/layers.ts): no file of src/
 * or workers/ imports, re-exports, dynamically imports or runs by URL a file of a higher layer.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import {
  folderOf,
  formatEdges,
  LAYERS,
  type SourceFile,
  specifiersOf,
  stripComments,
  upwardImports,
} from './util/layers.ts';

const ROOT = new URL('../', import.meta.url);

async function sourceFiles(dir: string): Promise<SourceFile[]> {
  const out: SourceFile[] = [];
  for await (const e of Deno.readDir(new URL(dir, ROOT))) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory) out.push(...await sourceFiles(path));
    else if (e.isFile && e.name.endsWith('.ts')) out.push({ path, text: await Deno.readTextFile(new URL(path, ROOT)) });
  }
  return out;
}

Deno.test('no import of src/ or workers/ points up the layer order', async () => {
  const files = [...await sourceFiles('src'), ...await sourceFiles('workers')];
  // The scan must see the tree's imports at all: every layer folder exists and the files
  // import across folders hundreds of times (a scanner that found nothing would pass vacuously).
  const folders = new Set(files.map((f) => folderOf(f.path)));
  for (const f of LAYERS.flat()) ok(folders.has(f), `LAYERS places ${f}, which has no .ts file`);
  const crossing = files.flatMap((f) =>
    specifiersOf(f.text).filter((s) => s.startsWith('../') && !s.startsWith('../../shaders/'))
  );
  ok(crossing.length > 500, `only ${crossing.length} imports leave their folder; the scanner misses imports`);
  const up = upwardImports(files);
  equal(up.length, 0, `imports pointing up the layer order (docs/design.md#layers):\n${formatEdges(up)}`);
});

Deno.test('the checker reports an upward import in every form, and only those', () => {
  const files: SourceFile[] = [
    {
      path: 'src/gpu/a.ts',
      text: [
        "import { x } from '../kernels/k.ts'; // upward, static",
        "export type { Y } from '../models/m.ts';",
        'import {\n  a,\n  type B,\n} from "../train/t.ts";',
        "const w = new Worker(new URL('../../workers/rank.worker.ts', import.meta.url), { type: 'module' });",
        "const m = await import('../parallel/p.ts');",
        "import { near } from './b.ts'; // same folder",
        "import { low } from '../util/random.ts'; // downward",
        "// import { c } from '../cli/c.ts'; in a comment",
        "/* import('../app/main.ts') */ const s = 'import(\\'' + `${'x'}` + '\\')';",
        "const re = /['\"`]/g; import { z } from 'zod';",
      ].join('\n'),
    },
    { path: 'src/bench/b.ts', text: "import { e } from '../experiments/e.ts'; // same layer" },
    { path: 'src/parallel/p.ts', text: "import { t } from '../perf/step_time.ts'; // upward: perf sits above" },
  ];
  deepStrictEqual(
    formatEdges(upwardImports(files)),
    [
      'src/gpu/a.ts → src/kernels/k.ts (src/gpu → src/kernels)',
      'src/gpu/a.ts → src/models/m.ts (src/gpu → src/models)',
      'src/gpu/a.ts → src/train/t.ts (src/gpu → src/train)',
      'src/gpu/a.ts → workers/rank.worker.ts (src/gpu → workers)',
      'src/gpu/a.ts → src/parallel/p.ts (src/gpu → src/parallel)',
      'src/parallel/p.ts → src/perf/step_time.ts (src/parallel → src/perf)',
    ].join('\n'),
  );
});

Deno.test("the scanner finds the same imports as Deno's module graph", async () => {
  // Deno's own parser, over the graphs of the command entries and the rank worker (the scanner
  // exists because the repository's TypeScript has no JavaScript API: tests/util/layers.ts).
  const roots = [
    'src/cli/train.ts',
    'src/cli/bench.ts',
    'src/cli/experiment.ts',
    'src/cli/plan.ts',
    'workers/rank.worker.ts',
  ];
  const root = ROOT.href;
  const seen = new Set<string>();
  for (const r of roots) {
    const out = await new Deno.Command(Deno.execPath(), { args: ['info', '--json', r], cwd: ROOT, stderr: 'inherit' })
      .output();
    ok(out.success, `deno info ${r} failed`);
    const graph = JSON.parse(new TextDecoder().decode(out.stdout)) as {
      modules: { specifier: string; dependencies?: { specifier: string }[] }[];
    };
    for (const m of graph.modules) {
      if (!m.specifier.startsWith(root) || m.specifier.includes('/node_modules/')) continue;
      if (!m.specifier.endsWith('.ts') || seen.has(m.specifier)) continue;
      seen.add(m.specifier);
      const deno = [...new Set((m.dependencies ?? []).map((d) => d.specifier).filter((s) => s.startsWith('.')))].sort();
      const text = await Deno.readTextFile(new URL(m.specifier));
      const ours = [...new Set(specifiersOf(text, false).filter((s) => s.startsWith('.')))].sort();
      deepStrictEqual(ours, deno, m.specifier.slice(root.length));
    }
  }
  ok(seen.size > 200, `only ${seen.size} modules compared`);
});

Deno.test('a folder the layer order does not place is an error, not a pass', () => {
  const files = [{ path: 'src/newdir/a.ts', text: "import { g } from '../gpu/context.ts';" }];
  throws(() => upwardImports(files), (e: Error) => e.message.includes('src/newdir/a.ts (folder src/newdir)'));
  const into = [{ path: 'src/gpu/a.ts', text: "import { n } from '../newdir/n.ts';" }];
  throws(
    () => upwardImports(into),
    (e: Error) => e.message.includes('src/newdir/n.ts (folder src/newdir, imported by src/gpu/a.ts)'),
  );
});

Deno.test('comments are blanked, strings and regex literals are not mistaken for them', () => {
  const src = "const a = '//x'; /* c */ const r = /\\/\\*/; // tail\nconst t = `${'/*'}`;";
  const out = stripComments(src);
  deepStrictEqual(out.length, src.length);
  ok(out.includes("'//x'") && out.includes('/\\/\\*/') && out.includes("`${'/*'}`"), out);
  ok(!out.includes('/* c */') && !out.includes('tail'), out);
  throws(() => stripComments('const s = "open;\n'), (e: Error) => e.message.includes('unterminated string'));
});

Deno.test('docs/design.md#layers draws the layers in the order of tests/util/layers.ts', async () => {
  const doc = await Deno.readTextFile(new URL('docs/design.md', ROOT));
  const start = doc.indexOf('\n## Layers\n'), end = doc.indexOf('\n## ', start + 1);
  ok(start >= 0 && end > start, 'docs/design.md has no "## Layers" section followed by another');
  const section = doc.slice(start, end);
  const picture = section.slice(section.indexOf('```'), section.indexOf('```', section.indexOf('```') + 3));
  // Each line of the picture names one layer: its folders, left to right.
  const drawn = picture.split('\n')
    .map((l) => [...l.matchAll(/(?:^|\s)(src\/[a-z_]+|workers)(?=[\s/:]|$)/g)].map((m) => m[1]))
    .filter((l) => l.length);
  deepStrictEqual(drawn, LAYERS.map((l) => [...l]));
});
