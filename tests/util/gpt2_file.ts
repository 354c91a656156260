/** A GPT-2-shaped checkpoint in Hugging Face's layout, for the import and export tests. */
import { randn } from './assert.ts';
import type { NamedTensor } from '../../src/util/safetensors.ts';

/**
 * Every tensor of a GPT-2 checkpoint as transformers saves it: no prefix, Conv1D weights as
 * (in, out), the causal-mask buffers `h.N.attn.bias`; values of the scale GPT-2 has.
 */
export function gpt2File(
  s: { nLayer: number; nEmbd: number; vocabSize: number; positions: number },
  seed = 1,
): NamedTensor[] {
  const { nLayer: L, nEmbd: C, vocabSize: V, positions: POS } = s;
  let k = seed;
  const t = (name: string, shape: number[], scale = 0.2, mean = 0): NamedTensor => {
    const n = shape.reduce((a, b) => a * b, 1);
    return { name, shape, data: Float32Array.from(randn(n, k++), (v) => mean + scale * v) };
  };
  const out = [t('wte.weight', [V, C]), t('wpe.weight', [POS, C], 0.05)];
  for (let i = 0; i < L; i++) {
    const h = `h.${i}`;
    out.push(
      t(`${h}.ln_1.weight`, [C], 0.1, 1),
      t(`${h}.ln_1.bias`, [C], 0.1),
      // The causal mask buffer transformers keeps in old checkpoints: not a parameter.
      { name: `${h}.attn.bias`, shape: [1, 1, POS, POS], data: new Float32Array(POS * POS).fill(1) },
      t(`${h}.attn.c_attn.weight`, [C, 3 * C]),
      t(`${h}.attn.c_attn.bias`, [3 * C], 0.05),
      t(`${h}.attn.c_proj.weight`, [C, C]),
      t(`${h}.attn.c_proj.bias`, [C], 0.05),
      t(`${h}.ln_2.weight`, [C], 0.1, 1),
      t(`${h}.ln_2.bias`, [C], 0.1),
      t(`${h}.mlp.c_fc.weight`, [C, 4 * C]),
      t(`${h}.mlp.c_fc.bias`, [4 * C], 0.05),
      t(`${h}.mlp.c_proj.weight`, [4 * C, C]),
      t(`${h}.mlp.c_proj.bias`, [C], 0.05),
    );
  }
  out.push(t('ln_f.weight', [C], 0.1, 1), t('ln_f.bias', [C], 0.1));
  return out;
}
