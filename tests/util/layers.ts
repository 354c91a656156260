/**
 * The layer order of src/ and workers/ (docs/design.md#layers), written once, and the checker that
 * finds every import pointing up it. The repository's TypeScript (7, a native binary) has no
 * JavaScript API, so imports are read by a small scanner: comments are blanked first (strings,
 * template literals and regex literals are skipped intact), then the import forms are matched.
 */

/**
 * Top to bottom. A file may import its own layer or any layer below; the folders of one layer
 * may import each other. docs/design.md#layers draws exactly this order.
 */
export const LAYERS: readonly (readonly string[])[] = [
  ['src/cli'],
  ['src/bench', 'src/experiments'],
  ['src/io'],
  ['src/app'],
  ['workers'],
  ['src/perf'],
  ['src/parallel'],
  ['src/train'],
  ['src/reference'],
  ['src/models'],
  ['src/nn'],
  ['src/autograd'],
  ['src/comm'],
  ['src/kernels'],
  ['src/gpu'],
  ['src/data'],
  ['src/util'],
];

/** One source file: its repository-relative POSIX path and its text. */
export interface SourceFile {
  path: string;
  text: string;
}

/** One import between two files (repository-relative paths) with their layer folders. */
export interface ImportEdge {
  from: string;
  to: string;
  fromLayer: string;
  toLayer: string;
}

/** Characters after which a `/` starts a regex literal rather than a division. */
const BEFORE_REGEX = new Set('(,=:[!&|?{};+-*%<>~^'.split(''));
const KEYWORDS_BEFORE_REGEX = /(?:^|[^\w$])(?:return|typeof|case|do|else|in|of|void|yield|await|delete|throw|new)$/;

/** Whether a `/` after the code `before` (trimmed) starts a regex literal. */
function regexMayStart(before: string): boolean {
  // `x! / y`: TypeScript's non-null assertion, not a logical not.
  if (/[\w$)\]]!$/.test(before)) return false;
  return before === '' || BEFORE_REGEX.has(before.at(-1)!) || KEYWORDS_BEFORE_REGEX.test(before);
}

/**
 * `text` with every comment replaced by spaces (newlines kept, so offsets and line numbers hold).
 * @throws Error on an unterminated string, template, regex or block comment, naming the offset.
 */
export function stripComments(text: string): string {
  const out = text.split('');
  const blank = (a: number, b: number) => {
    for (let k = a; k < b; k++) if (out[k] !== '\n') out[k] = ' ';
  };
  // Brace depths at which a template literal's `${` was opened, innermost last.
  const templates: number[] = [];
  let depth = 0, i = 0, last = ''; // last: the code before i, trimmed, for the regex decision
  const skipQuoted = (q: string, start: number): number => {
    let k = start + 1;
    while (k < text.length && text[k] !== q) {
      if (text[k] === '\\') k++;
      else if (text[k] === '\n') throw new Error(`unterminated string at offset ${start}`);
      k++;
    }
    if (k >= text.length) throw new Error(`unterminated string at offset ${start}`);
    return k + 1;
  };
  // Skips template text from `k` to its closing backtick (returns after it) or to a `${` (returns after it).
  const skipTemplate = (k: number): { end: number; open: boolean } => {
    while (k < text.length) {
      if (text[k] === '\\') k += 2;
      else if (text[k] === '`') return { end: k + 1, open: false };
      else if (text[k] === '$' && text[k + 1] === '{') return { end: k + 2, open: true };
      else k++;
    }
    throw new Error('unterminated template literal');
  };
  while (i < text.length) {
    const c = text[i], n = text[i + 1];
    if (c === '/' && n === '/') {
      const e = text.indexOf('\n', i);
      const end = e < 0 ? text.length : e;
      blank(i, end);
      i = end;
    } else if (c === '/' && n === '*') {
      const e = text.indexOf('*/', i + 2);
      if (e < 0) throw new Error(`unterminated block comment at offset ${i}`);
      blank(i, e + 2);
      i = e + 2;
    } else if (c === '/' && regexMayStart(last.trimEnd())) {
      let k = i + 1, cls = false;
      while (k < text.length && (cls || text[k] !== '/')) {
        if (text[k] === '\\') k++;
        else if (text[k] === '[') cls = true;
        else if (text[k] === ']') cls = false;
        else if (text[k] === '\n') throw new Error(`unterminated regex literal at offset ${i}`);
        k++;
      }
      i = k + 1;
      last = 'x';
    } else if (c === "'" || c === '"') {
      i = skipQuoted(c, i);
      last = 'x';
    } else if (c === '`') {
      const t = skipTemplate(i + 1);
      if (t.open) templates.push(depth++);
      i = t.end;
      last = t.open ? '{' : 'x';
    } else if (c === '}' && templates.length && templates.at(-1) === depth - 1) {
      templates.pop();
      depth--;
      const t = skipTemplate(i + 1);
      if (t.open) templates.push(depth++);
      i = t.end;
      last = t.open ? '{' : 'x';
    } else {
      if (c === '{') depth++;
      else if (c === '}') depth--;
      if (!/\s/.test(c)) last = (last + c).slice(-16);
      else if (!last.endsWith(' ')) last += ' ';
      i++;
    }
  }
  return out.join('');
}

/** `import … from '…'`, `import '…'`, `export … from '…'` (type-only ones included). */
const STATIC = /(?:^|[^\w$.])(?:import|export)\s+(?:[\w$*{},\s]*?\s*from\s*)?(['"])([^'"\n]+)\1/g;
/** `import('…')` with a literal specifier. */
const DYNAMIC = /(?:^|[^\w$.])import\s*\(\s*(['"])([^'"\n]+)\1\s*[,)]/g;
/** `new URL('….ts', import.meta.url)`: a module run as a worker or a subprocess. */
const MODULE_URL = /\bnew\s+URL\s*\(\s*(['"])([^'"\n]+\.ts)\1\s*,\s*import\.meta\.url\s*\)/g;

/**
 * Every module specifier `text` imports, re-exports, loads dynamically or (with `urls`) runs by
 * URL, in order of appearance.
 */
export function specifiersOf(text: string, urls = true): string[] {
  const code = stripComments(text);
  const found: [number, string][] = [];
  for (const re of urls ? [STATIC, DYNAMIC, MODULE_URL] : [STATIC, DYNAMIC]) {
    for (const m of code.matchAll(re)) found.push([m.index, m[2]]);
  }
  return found.sort((a, b) => a[0] - b[0]).map(([, s]) => s);
}

/** `spec` relative to the file at `from` (both POSIX, repository-relative); null when not relative. */
export function resolveSpecifier(from: string, spec: string): string | null {
  if (!spec.startsWith('./') && !spec.startsWith('../')) return null;
  const parts = from.split('/').slice(0, -1);
  for (const p of spec.split('/')) {
    if (p === '..') {
      if (!parts.length) throw new Error(`${from}: '${spec}' leaves the repository`);
      parts.pop();
    } else if (p !== '.') parts.push(p);
  }
  return parts.join('/');
}

/** The layer folder of `path` ('src/<dir>' or 'workers'), or null outside src/ and workers/. */
export function folderOf(path: string): string | null {
  const p = path.split('/');
  if (p[0] === 'workers') return 'workers';
  return p[0] === 'src' && p.length > 2 ? `src/${p[1]}` : null;
}

/**
 * Every import of `files` that points up `layers`, in file order.
 * @throws Error naming each file, or imported file, whose folder `layers` does not place.
 */
export function upwardImports(files: readonly SourceFile[], layers = LAYERS): ImportEdge[] {
  const rank = new Map<string, number>();
  layers.forEach((l, i) => l.forEach((f) => rank.set(f, i)));
  const unplaced = new Set<string>(), up: ImportEdge[] = [];
  for (const f of files) {
    const fromLayer = folderOf(f.path);
    if (fromLayer === null || !rank.has(fromLayer)) {
      unplaced.add(`${f.path} (folder ${fromLayer})`);
      continue;
    }
    for (const spec of specifiersOf(f.text)) {
      const to = resolveSpecifier(f.path, spec);
      const toLayer = to === null ? null : folderOf(to);
      if (to === null || toLayer === null) continue; // a package, or shaders/, public/
      if (!rank.has(toLayer)) unplaced.add(`${to} (folder ${toLayer}, imported by ${f.path})`);
      else if (rank.get(toLayer)! < rank.get(fromLayer)!) up.push({ from: f.path, to, fromLayer, toLayer });
    }
  }
  if (unplaced.size) {
    throw new Error(`not placed in LAYERS (tests/util/layers.ts):\n  ${[...unplaced].join('\n  ')}`);
  }
  return up;
}

/** One line per edge: `file → imported file (layer → layer)`. */
export function formatEdges(edges: readonly ImportEdge[]): string {
  return edges.map((e) => `${e.from} → ${e.to} (${e.fromLayer} → ${e.toLayer})`).join('\n');
}
