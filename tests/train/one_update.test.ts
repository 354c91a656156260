/**
 * One update function (llm.c's rule, docs/design.md#the-one-optimizer-update): every trainer's step ends in
 * src/train/optimizer.ts's AdamW, so the AdamW kernel and its hyperparameter packing are called
 * from that file only.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';

async function* sources(dir: URL): AsyncGenerator<{ path: string; text: string }> {
  for await (const e of Deno.readDir(dir)) {
    const url = new URL(e.name + (e.isDirectory ? '/' : ''), dir);
    if (e.isDirectory) yield* sources(url);
    else if (e.name.endsWith('.ts')) yield { path: url.pathname, text: await Deno.readTextFile(url) };
  }
}

Deno.test('AdamW is applied in src/train/optimizer.ts only: no other file calls adamwUpdate or packAdamHyper', async () => {
  const callers: string[] = [];
  let files = 0;
  for await (const f of sources(new URL('../../src/', import.meta.url))) {
    files++;
    if (f.path.endsWith('/src/kernels/adamw.ts')) continue; // where they are defined
    if (/\b(adamwUpdate|packAdamHyper)\(/.test(f.text)) callers.push(f.path.slice(f.path.indexOf('/src/') + 1));
  }
  ok(files > 100, `walked ${files} source files`);
  deepStrictEqual(callers, ['src/train/optimizer.ts']);
});
