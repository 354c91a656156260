/**
 * What a guide links to and which commands it quotes in running text, read out of its markdown for
 * tests/cli/doc_tour.test.ts.
 */

/** `markdown` without its fenced blocks and inline code spans: only prose and link syntax remain. */
function prose(markdown: string): string {
  let fenced = false;
  return markdown.split('\n').map((line) => {
    if (line.trim().startsWith('```')) {
      fenced = !fenced;
      return '';
    }
    return fenced ? '' : line.replace(/`[^`]*`/g, '');
  }).join('\n');
}

/** The targets of `[text](target)` links outside code, in document order, as written. */
export function markdownLinks(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
}

/**
 * The anchors GitHub gives the headings of `markdown` (fenced blocks skipped): the heading's text
 * lower-cased, every character but letters, digits, spaces, `-` and `_` dropped, spaces turned
 * into `-`; a repeated anchor gets `-1`, `-2`, … as GitHub numbers them.
 */
export function headingAnchors(markdown: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.trim().startsWith('```')) fenced = !fenced;
    const h = fenced ? null : /^#{1,6} (.*)$/.exec(line);
    if (!h) continue;
    const base = h[1].trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replaceAll(' ', '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The inline code spans outside fenced blocks that quote a command: those starting `npm run ` or `mpirun `. */
export function quotedCommands(markdown: string): string[] {
  let fenced = false;
  const out: string[] = [];
  for (const line of markdown.split('\n')) {
    if (line.trim().startsWith('```')) fenced = !fenced;
    else if (!fenced) {
      for (const m of line.matchAll(/`([^`]+)`/g)) if (/^(npm run|mpirun) /.test(m[1])) out.push(m[1]);
    }
  }
  return out;
}

/**
 * Where the relative links of the guide `file` (a path from the repository root) fail to land:
 * a target file that does not exist, or an `#anchor` no heading of the target gives. Web links are
 * not followed.
 * @returns one line per broken link, empty when every link lands.
 */
export async function brokenLinks(root: string, file: string, markdown: string): Promise<string[]> {
  const dir = file.includes('/') ? file.slice(0, file.lastIndexOf('/') + 1) : '';
  const broken: string[] = [];
  for (const link of markdownLinks(markdown)) {
    if (/^[a-z]+:/i.test(link)) continue;
    const [path, anchor] = link.split('#', 2);
    // A bare `#anchor` points into this guide itself.
    const target = path ? new URL(path, `file://${root}${dir}`).pathname.slice(root.length) : file;
    let text = markdown;
    if (path) {
      try {
        text = await Deno.readTextFile(`${root}${target}`);
      } catch {
        broken.push(`${file}: ${link}: no file ${target}`);
        continue;
      }
    }
    if (anchor !== undefined && !headingAnchors(text).has(anchor)) {
      broken.push(`${file}: ${link}: no heading with the anchor #${anchor} in ${target}`);
    }
  }
  return broken;
}

/** Where the repository's text files cite docs/design.md: the folders below, and README.md and docs/*.md. */
export const CITING_FOLDERS = ['src', 'workers', 'shaders', 'tests', 'e2e', 'scripts'];
const TEXT_FILE = /\.(ts|js|mjs|wgsl|sh|c|py|md|json|html|css)$/;

/**
 * Every text file that may cite docs/design.md, as a path from the repository root: the files of
 * {@link CITING_FOLDERS} (node_modules skipped), the root's `.ts` and `.md` files and docs/*.md.
 */
export async function citingFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string) => {
    for await (const e of Deno.readDir(`${root}${dir}`)) {
      const path = `${dir}/${e.name}`;
      if (e.isDirectory && e.name !== 'node_modules') await walk(path);
      else if (e.isFile && TEXT_FILE.test(e.name)) out.push(path);
    }
  };
  for (const dir of CITING_FOLDERS) await walk(dir);
  for await (const e of Deno.readDir(root)) if (e.isFile && /\.(ts|md)$/.test(e.name)) out.push(e.name);
  for await (const e of Deno.readDir(`${root}docs`)) if (e.isFile && e.name.endsWith('.md')) out.push(`docs/${e.name}`);
  return out.sort();
}

/**
 * The citations of design notes in `text` (one file's): each `design.md#<anchor>` with its line
 * and anchor, and each citation by section number — `design.md §N` or `design §N`, the number
 * possibly on the next line of a comment — which the unnumbered headings replaced.
 */
export function designCitations(text: string): { anchors: { line: number; anchor: string }[]; numbered: number[] } {
  const lineOf = (i: number) => text.slice(0, i).split('\n').length;
  const anchors = [...text.matchAll(/design\.md#([\p{L}\p{N}_-]+)/gu)].map((m) => ({
    line: lineOf(m.index),
    anchor: m[1],
  }));
  const numbered = [...text.matchAll(/\bdesign(?:\.md)?[ \t]*(?:\n[ \t]*(?:\*|\/\/|#)?[ \t]*)?§\s*\d/g)].map((m) =>
    lineOf(m.index)
  );
  return { anchors, numbered };
}

/**
 * What is wrong with the design citations of `files` against docs/design.md's text `design`: one
 * line per anchor no heading of it gives, and per citation by section number.
 * @returns `path:line: …` lines, empty when every citation names a heading.
 */
export function brokenDesignCitations(files: { path: string; text: string }[], design: string): string[] {
  const headings = headingAnchors(design);
  const broken: string[] = [];
  for (const { path, text } of files) {
    const { anchors, numbered } = designCitations(text);
    for (const { line, anchor } of anchors) {
      if (!headings.has(anchor)) broken.push(`${path}:${line}: design.md#${anchor} names no heading of docs/design.md`);
    }
    for (const line of numbered) {
      broken.push(`${path}:${line}: cites docs/design.md by section number; link a heading (design.md#<anchor>)`);
    }
  }
  return broken;
}
