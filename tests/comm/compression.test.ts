/**
 * The compression policy and its accounting without a GPU (src/comm/compression.ts,
 * compressed_cost.ts): schemes and policies parse, print back and refuse bad input by name;
 * words per scheme follow the formulas; a compressed call's words are its word-level phases'
 * and `none` is the uncompressed call; PowerSGD's worth test is PyTorch's rate of 2.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import {
  compresses,
  formatCompressPolicy,
  formatScheme,
  needsErrorFeedback,
  parseCompressPolicy,
  parseScheme,
  powerSgdCompresses,
  schemeWords,
} from '../../src/comm/compression.ts';
import { compressedTraffic, compressedUs } from '../../src/comm/compressed_cost.ts';
import { collectiveTraffic, predictUs } from '../../src/comm/cost.ts';

Deno.test('schemes parse with their defaults, print back, and refuse bad parameters naming what is allowed', () => {
  deepStrictEqual(parseScheme('int8'), { kind: 'int8', block: 256 });
  deepStrictEqual(parseScheme('int4'), { kind: 'int4', block: 256 });
  deepStrictEqual(parseScheme('topk'), { kind: 'topk', density: 0.01 });
  deepStrictEqual(parseScheme('powersgd'), { kind: 'powersgd', rank: 4 });
  for (const t of ['none', 'fp16', 'bf16', 'int8:32', 'int4:32', 'int4:4096', 'topk:0.25', 'sign', 'powersgd:8']) {
    equal(formatScheme(parseScheme(t)), t);
  }
  throws(() => parseScheme('int8:100'), /int8 block must be one of 32, 64/);
  throws(
    () => parseScheme('int4:16'),
    /'int4:16': the int4 block must be one of 32, 64, .*, 4096 \(allowed: .*int4\[:block\]/,
  );
  throws(() => parseScheme('int4:x'), /the int4 block must be one of/);
  throws(() => parseScheme('topk:0'), /density must be in \(0, 1\]/);
  throws(() => parseScheme('powersgd:0'), /rank must be an integer in 1–64/);
  throws(() => parseScheme('fp16:2'), /fp16 takes no parameter/);
  throws(() => parseScheme('zfp'), /unknown scheme 'zfp' \(allowed: none, fp16/);
});

Deno.test('policies: per dimension, naive, none; PowerSGD only on dp; repeats and unknown dims refused', () => {
  const p = parseCompressPolicy('dp=powersgd:4,tp=fp16,pp=int8,cp=none');
  equal(formatCompressPolicy(p), 'dp=powersgd:4,tp=fp16,pp=int8:256');
  equal(p.ep.kind, 'none');
  equal(formatCompressPolicy(parseCompressPolicy('dp=int4:64,tp=int8')), 'dp=int4:64,tp=int8:256');
  ok(!needsErrorFeedback(parseScheme('int4')) && needsErrorFeedback(parseScheme('sign')), 'int4 as int8: no residual');
  ok(compresses(p) && !compresses(parseCompressPolicy('none')) && !compresses(undefined));
  equal(formatCompressPolicy(parseCompressPolicy('naive:bf16')), 'dp=bf16,tp=bf16,pp=bf16,cp=bf16,ep=bf16');
  throws(
    () => parseCompressPolicy('naive:powersgd'),
    /PowerSGD compresses dp gradient matrices only; give it as dp=powersgd:4/,
  );
  throws(() => parseCompressPolicy('pp=powersgd'), /pp=powersgd: PowerSGD compresses dp gradient matrices only/);
  throws(() => parseCompressPolicy('dp=int8,dp=bf16'), /dimension dp is given twice/);
  throws(() => parseCompressPolicy('tp'), /'tp' is not dim=scheme/);
});

Deno.test('words per scheme; compressed calls cost their phases; none is the plain call', () => {
  equal(schemeWords(parseScheme('bf16'), 7), 4);
  equal(schemeWords(parseScheme('int8:32'), 100), 25 + 4);
  equal(schemeWords(parseScheme('int4:32'), 100), 13 + 4);
  equal(schemeWords(parseScheme('int4'), 7), 1 + 1);
  equal(schemeWords(parseScheme('sign'), 65), 3 + 1);
  equal(schemeWords(parseScheme('topk:0.1'), 95), 20);
  throws(() => schemeWords(parseScheme('powersgd'), 10), /depends on the matrix shape/);
  const s = parseScheme('int8:64'), n = 1001, p = 3, w = 3 * schemeWords(s, Math.ceil(n / p));
  for (let r = 0; r < p; r++) {
    const a2a = collectiveTraffic('allToAll', 'direct', w, p, r), ag = collectiveTraffic('allGather', 'ring', w, p, r);
    deepStrictEqual(compressedTraffic('allReduce', s, n, p, r), {
      elements: a2a.elements + ag.elements,
      messages: a2a.messages + ag.messages,
    });
    deepStrictEqual(
      compressedTraffic('allReduce', parseScheme('none'), n, p, r),
      collectiveTraffic('allReduce', 'ring', n, p, r),
    );
  }
  deepStrictEqual(compressedTraffic('send', s, n, 2, 0), { elements: schemeWords(s, n), messages: 1 });
  throws(() => compressedTraffic('reduceScatter', s, 10, 3, 0), /does not split over 3 ranks/);
  const link = { alphaUs: 5, betaGBps: 10 };
  equal(compressedUs('allReduce', parseScheme('none'), n, p, link), predictUs('allReduce', 'ring', 4 * n, p, link));
  ok(
    compressedUs('allReduce', s, 1 << 20, 4, link) < predictUs('allReduce', 'ring', 4 << 20, 4, link),
    'int8 is faster on a large vector',
  );
});

Deno.test('PowerSGD compresses a matrix only where P and Q are at most half of it', () => {
  ok(powerSgdCompresses(64, 64, 4) && !powerSgdCompresses(12, 5, 2) && !powerSgdCompresses(3, 100, 4));
  ok(powerSgdCompresses(8, 12, 2), '2·2·20 = 80 ≤ 96');
});
