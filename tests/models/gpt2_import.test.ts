/**
 * GPT-2 checkpoint import and export (src/models/gpt2_hf.ts) on a small GPT-2-shaped file the
 * test writes in Hugging Face's layout (Conv1D weights as (in, out), causal-mask buffers, no
 * prefix): the imported model's logits match an f64 forward written against that layout
 * directly, import → export gives back the file's tensors bit for bit, and every way a file can
 * fail to fit the run is one clear error.
 */
import { equal, match, ok, throws } from 'node:assert/strict';
import { gpt2File } from '../util/gpt2_file.ts';
import { gpuTest } from '../util/gpu.ts';
import { assertClose } from '../util/assert.ts';
import { encodeSafetensors, type NamedTensor } from '../../src/util/safetensors.ts';
import { exportGpt2, importGpt2 } from '../../src/models/gpt2_hf.ts';
import { initFromGpt2 } from '../../src/train/init_from.ts';
import { createModel } from '../../src/models/registry.ts';
import { parseConfig } from '../../src/train/config.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { logitsOf } from '../../src/models/model.ts';
import { matmulRef } from '../../src/reference/matmul.ts';
import { layerNormRef } from '../../src/reference/layernorm.ts';
import { attentionForwardRef } from '../../src/reference/attention.ts';
import { geluRef } from '../../src/reference/elementwise.ts';

const [L, C, NH, V, POS] = [2, 16, 2, 37, 24];

const hfTensors = (seed = 1) => gpt2File({ nLayer: L, nEmbd: C, vocabSize: V, positions: POS }, seed);

/**
 * GPT-2's forward in f64 straight from the Hugging Face tensors: Conv1D is x·W + b with W as
 * stored (in, out), so no transpose appears here, unlike in the import under test.
 */
function hfLogitsRef(hf: Map<string, NamedTensor>, tokens: Int32Array, b: number, t: number): Float64Array {
  const P = (n: string) => Float64Array.from(hf.get(n)!.data);
  const n = b * t;
  const conv1d = (x: Float64Array, name: string, cin: number, cout: number) => {
    const y = matmulRef(x, P(`${name}.weight`), n, cout, cin);
    const bias = P(`${name}.bias`);
    return y.map((v, i) => v + bias[i % cout]);
  };
  const ln = (x: Float64Array, name: string) => layerNormRef(x, P(`${name}.weight`), P(`${name}.bias`), n, C, 1e-5).y;
  const wte = P('wte.weight'), wpe = P('wpe.weight');
  let x = new Float64Array(n * C);
  for (let r = 0; r < n; r++) {
    for (let c = 0; c < C; c++) x[r * C + c] = wte[tokens[r] * C + c] + wpe[(r % t) * C + c];
  }
  for (let i = 0; i < L; i++) {
    const h = `h.${i}`;
    const qkv = conv1d(ln(x, `${h}.ln_1`), `${h}.attn.c_attn`, C, 3 * C);
    const y = attentionForwardRef(qkv, { b, t, c: C, nh: NH, causal: true }).y;
    const a = conv1d(y, `${h}.attn.c_proj`, C, C);
    x = x.map((v, k) => v + a[k]);
    const m = conv1d(geluRef(conv1d(ln(x, `${h}.ln_2`), `${h}.mlp.c_fc`, C, 4 * C)), `${h}.mlp.c_proj`, 4 * C, C);
    x = x.map((v, k) => v + m[k]);
  }
  return matmulRef(ln(x, 'ln_f'), wte, n, V, C, { transB: true });
}

const runCfg = (over: Record<string, unknown> = {}) =>
  parseConfig({ nLayer: L, nHead: NH, nEmbd: C, blockSize: 16, bias: true, ...over });

gpuTest('GPT-2 import: logits of the imported model match an f64 forward of the Hugging Face tensors', async (gpu) => {
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/gpt2.safetensors`;
    await Deno.writeFile(file, await encodeSafetensors(hfTensors(), { format: 'pt' }));
    const cfg = runCfg();
    const model = createModel(gpu, cfg, V);
    await initFromGpt2(model.params, cfg, V, file);
    const [b, t] = [2, 16];
    const tokens = Int32Array.from({ length: b * t }, (_, i) => (i * 7 + 3) % V);
    const tTok = gpu.upload(tokens, [b, t], 'i32');
    const tape = new Tape(gpu, model.params.gradMap());
    const logits = await gpu.read(logitsOf(await model.forward(tape, tTok, tokens, null, b, t), 'GPT-2 import'));
    tTok.release();
    const hf = new Map(hfTensors().map((x) => [x.name, x]));
    assertClose(logits, hfLogitsRef(hf, tokens, b, t), 'logits', 1e-4, 1e-3);
    model.params.destroy();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

gpuTest('GPT-2 import → export gives back the checkpoint tensors bit for bit (mask buffers aside)', async (gpu) => {
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/gpt2.safetensors`;
    const original = hfTensors(5);
    await Deno.writeFile(file, await encodeSafetensors(original, { format: 'pt' }));
    const cfg = runCfg({ blockSize: POS });
    const model = createModel(gpu, cfg, V);
    await initFromGpt2(model.params, cfg, V, file);
    const flat = await gpu.read(model.params.values);
    const params = model.params.params.map((p) => ({
      name: p.name,
      shape: p.shape,
      data: flat.slice(p.offset, p.offset + p.size) as Float32Array,
    }));
    const back = new Map(exportGpt2(params).map((t) => [t.name, t]));
    const kept = original.filter((t) => !t.name.endsWith('.attn.bias'));
    equal(back.size, kept.length);
    for (const t of kept) {
      const got = back.get(t.name);
      ok(got, `exported ${t.name}`);
      equal(got.shape.join(), t.shape.join(), `${t.name} shape`);
      ok(got.data.every((v, i) => Object.is(v, t.data[i])), `${t.name} bit for bit`);
    }
    model.params.destroy();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test('GPT-2 import: a file that does not fit the run is one clear error naming what to pass', () => {
  const ours = (cfg: ReturnType<typeof runCfg>) =>
    // The names and shapes our GPT declares, without building it on a GPU.
    [
      ...new Map(
        hfTensors().filter((t) => !t.name.endsWith('.attn.bias')).map((t) => {
          const conv = /\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$/.test(t.name);
          const shape = conv ? [t.shape[1], t.shape[0]] : t.name === 'wpe.weight' ? [cfg.blockSize, C] : t.shape;
          return [`transformer.${t.name}`, shape];
        }),
      ),
    ].map(([name, shape]) => ({ name, shape }));
  const file = (ts: NamedTensor[]) => new Map(ts.map((t) => [t.name, t]));
  const run = (over: Record<string, unknown> = {}, vocab = V) => ({ ...runCfg(over), vocabSize: vocab });
  const cfg = runCfg();
  const good = importGpt2(file(hfTensors()), run(), ours(cfg), 'f');
  equal(good.get('transformer.wpe.weight')!.length, 16 * C, 'wpe cropped to the block size');
  const cases: [() => unknown, RegExp][] = [
    [() => importGpt2(file(hfTensors()), run({ nLayer: 3 }), ours(cfg), 'f'), /2 layers \(--n-layer 2, run has 3\)/],
    [
      () => importGpt2(file(hfTensors()), run({}, 65), ours(cfg), 'f'),
      /vocabulary of 37 \(GPT-2's is 50257: --tokenizer gpt2/,
    ],
    [
      () => importGpt2(file(hfTensors()), run({ blockSize: 32 }), ours(cfg), 'f'),
      /--block-size 32 exceeds the checkpoint's 24 positions/,
    ],
    [() => importGpt2(file(hfTensors()), run({ bias: false }), ours(cfg), 'f'), /drop --no-bias/],
    [
      () => importGpt2(file(hfTensors().filter((t) => t.name !== 'h.1.mlp.c_fc.bias')), run(), ours(cfg), 'f'),
      /missing tensor 'h\.1\.mlp\.c_fc\.bias'/,
    ],
    [
      () =>
        importGpt2(
          file([...hfTensors(), { name: 'h.0.extra', shape: [1], data: new Float32Array(1) }]),
          run(),
          ours(cfg),
          'f',
        ),
      /does not have: transformer\.h\.0\.extra/,
    ],
    [
      () => importGpt2(file(hfTensors().filter((t) => t.name !== 'wpe.weight')), run(), ours(cfg), 'f'),
      /not a GPT-2 checkpoint/,
    ],
    [() => {
      const ts = hfTensors().map((t) => t.name === 'h.0.attn.c_proj.weight' ? { ...t, shape: [C, C / 2, 2] } : t);
      return importGpt2(file(ts), run(), ours(cfg), 'f');
    }, /'h\.0\.attn\.c_proj\.weight' is \[16,8,2\], expected \[16,16\]/],
    [() => {
      const ts = [...hfTensors(), { name: 'lm_head.weight', shape: [V, C], data: new Float32Array(V * C) }];
      return importGpt2(file(ts), run(), ours(cfg), 'f');
    }, /'lm_head\.weight' differs from 'wte\.weight'/],
  ];
  for (const [f, want] of cases) {
    throws(f, (e: Error) => (match(e.message, /^--init-from f: /), match(e.message, want), true));
  }
  // A tied lm_head equal to wte is accepted.
  const wte = hfTensors().find((t) => t.name === 'wte.weight')!;
  importGpt2(file([...hfTensors(), { ...wte, name: 'lm_head.weight' }]), run(), ours(cfg), 'f');
});

Deno.test('GPT-2 import: a file that is not safetensors, or is another architecture, fails before any weight is set', async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/x.safetensors`, 'not a checkpoint');
    const store = { params: [] } as unknown as Parameters<typeof initFromGpt2>[0];
    await initFromGpt2(store, runCfg(), V, `${dir}/x.safetensors`).then(
      () => ok(false, 'accepted garbage'),
      (e: Error) => match(e.message, /Corrupt checkpoint .*x\.safetensors: header length/),
    );
    await initFromGpt2(store, runCfg({ arch: 'mamba' }), V, `${dir}/x.safetensors`).then(
      () => ok(false, 'accepted mamba'),
      (e: Error) => match(e.message, /load into --arch gpt, not --arch mamba/),
    );
    await initFromGpt2(store, runCfg(), V, `${dir}/missing.safetensors`).then(
      () => ok(false, 'accepted a missing file'),
      (e: Error) => match(e.message, /--init-from .*missing\.safetensors: cannot read it/),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
