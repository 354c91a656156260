/**
 * One validator for `npm run train` and `npm run plan`: strict numbers (no blank-as-zero, hex
 * or non-finite), the same plan rules and micro-batch default for both, maxima checked before
 * anything is allocated, --config files that must be JSON objects, and booleans as users type them.
 */
import { deepStrictEqual, equal, match, rejects, throws } from 'node:assert/strict';
import { parseTrainArgs, trainHelp } from '../../src/cli/args.ts';
import { checkCommand } from '../../src/cli/command.ts';
import { parseDecimal } from '../../src/cli/flags.ts';
import { planFromArgs } from '../../src/cli/plan.ts';

Deno.test('parseDecimal reads decimal and exponent forms only', () => {
  for (
    const [text, n] of [['0', 0], ['42', 42], ['-1.5', -1.5], ['+3', 3], ['.5', 0.5], ['5.', 5], ['1e-3', 1e-3], [
      '2E+2',
      200,
    ]] as const
  ) equal(parseDecimal(text), n, text);
  for (
    const text of [
      '',
      ' ',
      '\t',
      ' 1',
      '1 ',
      '0x10',
      '0b1',
      '1_000',
      '1,5',
      'Infinity',
      '-Infinity',
      'NaN',
      '1e999',
      'e5',
      '.',
      '--1',
      '1e',
    ]
  ) {
    equal(parseDecimal(text), undefined, JSON.stringify(text));
  }
});

Deno.test('blank, whitespace, hex and non-finite values are refused by train and plan, naming the flag', async () => {
  for (const flag of ['weight-decay', 'seed', 'min-lr', 'n-layer', 'lr']) {
    for (const v of ['', ' ', '\t', '0x10', 'Infinity', 'NaN', '1e999']) {
      throws(
        () => parseTrainArgs([`--${flag}`, v]),
        new RegExp(`^Error: --${flag} expects a number, got '${v.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}'$`),
      );
      await rejects(
        checkCommand([`--${flag}=${v}`, '--vocab-size', '65'], 'plan'),
        new RegExp(`--${flag} expects a number`),
      );
    }
  }
  throws(
    () => parseTrainArgs(['--seed', ' ', '--seed', '5']),
    /--seed expects a number, got ' '/,
    'a later value does not hide a bad one',
  );
  for (const cmd of ['train', 'plan'] as const) {
    await rejects(checkCommand(['--zero', ' ', '--dp', '2'], cmd), /^Error: --zero expects an integer ≥ 0, got ' '$/);
    await rejects(checkCommand(['--dp', '0x2'], cmd), /--dp expects an integer ≥ 1, got '0x2'/);
  }
});

Deno.test('plan validates the MoE and plan flags with the train schema: same refusals, same micro-batch default', async () => {
  for (const cmd of ['train', 'plan'] as const) {
    await rejects(
      checkCommand(['--dp', '2', '--moe-top-k', '3', '--n-expert', '4'], cmd),
      /--moe-top-k must be one of 1, 2, got '3'/,
    );
    await rejects(checkCommand(['--dp', '2', '--capacity-factor', '0'], cmd), /--capacity-factor 0 must be above 0/);
    await rejects(
      checkCommand(['--dp', '2', '--cp-kind', 'tree'], cmd),
      /--cp-kind must be one of ring, ulysses, got 'tree'/,
    );
    const { plan } = await checkCommand(['--dp', '2', '--grad-accum', '4'], cmd);
    equal(plan?.microBatches, 4, `${cmd}: micro-batches default to gradAccum`);
    equal((await checkCommand(['--pp', '2', '--grad-accum', '4', '--micro-batches', '2'], cmd)).plan?.microBatches, 2);
  }
  await rejects(planFromArgs(['--vocab-size', '0']), /^Error: --vocab-size 0 is below the minimum 1$/);
  await rejects(planFromArgs(['--width', '1e20']), /^Error: --width 1e20 exceeds the maximum 400$/);
  await rejects(planFromArgs(['--width', '1e9']), /^Error: --width 1e9 exceeds the maximum 400$/);
  await rejects(
    planFromArgs(['--ep', '2', '--dp', '2', '--vocab-size', '65']),
    /ep 2 needs --arch gpt-moe or mamba-moe, got gpt/, // one rule, one message: train's (plan/rule_table.ts)
  );
  const moe = await planFromArgs([
    '--arch',
    'gpt-moe',
    '--ep',
    '2',
    '--dp',
    '2',
    '--n-expert',
    '4',
    '--vocab-size',
    '65',
  ]);
  equal(moe.model.nExpert, 4);
});

Deno.test('maxima are checked before anything is allocated, naming the flag and the maximum', async () => {
  throws(() => parseTrainArgs(['--n-embd', '1000000000']), /^Error: --n-embd 1000000000 exceeds the maximum 65536$/);
  throws(() => parseTrainArgs(['--n-layer', '5000']), /--n-layer 5000 exceeds the maximum 1024/);
  throws(() => parseTrainArgs(['--block-size', '1e7']), /--block-size 1e7 exceeds the maximum 131072/);
  throws(() => parseTrainArgs(['--batch-size', '1e300']), /--batch-size 1e300 exceeds the maximum 65536/);
  await rejects(
    checkCommand(['--dp', '128'], 'train'),
    /world size --dp·--pp·--cp·--tp = 128·1·1·1 = 128 exceeds the maximum 64 ranks of a real run/,
  );
  equal(
    (await checkCommand(['--dp', '128', '--batch-size', '128'], 'plan')).plan?.dp,
    128,
    'plan predicts larger worlds',
  );
  await rejects(checkCommand(['--dp', '64', '--tp', '128'], 'plan'), /= 8192 exceeds the maximum 4096 ranks/);
  await rejects(checkCommand(['--dp', '128', '--measure'], 'plan'), /exceeds the maximum 64 ranks/);
  equal((await checkCommand(['--pp', '2', '--grad-accum', '65536'], 'plan')).plan?.microBatches, 65536);
  await rejects(
    checkCommand(['--pp', '4', '--grad-accum', '65536'], 'plan'),
    /--pp × --virtual-stages × --micro-batches = 4 × 1 × 65536 = 262144 exceeds the maximum 131072 pipeline slots/,
  );
});

Deno.test('a --config file must be a JSON object; its errors name the file', async () => {
  const dir = await Deno.makeTempDir({ prefix: 'config-file-' });
  const write = async (
    name: string,
    text: string,
  ) => (await Deno.writeTextFile(`${dir}/${name}`, text), `${dir}/${name}`);
  for (const cmd of ['train', 'plan'] as const) {
    for (const [text, got] of [['null', 'null'], ['[1]', 'an array'], ['7', 'a number'], ['"x"', 'a string']]) {
      const f = await write('bad.json', text);
      await rejects(
        checkCommand(['--config', f, '--vocab-size', '65'].slice(0, cmd === 'plan' ? 4 : 2), cmd),
        new RegExp(`--config ${f} must hold a JSON object .*got ${got}`),
      );
    }
    const bad = await write('malformed.json', '{"nLayer": ');
    await rejects(checkCommand(['--config', bad], cmd), new RegExp(`--config ${bad}: malformed JSON`));
    await rejects(
      checkCommand(['--config', `${dir}/missing.json`], cmd),
      /--config .*missing\.json: cannot read the file/,
    );
    const big = await write('big.json', '{"nEmbd": 1000000000, "colour": "blue"}');
    await rejects(
      checkCommand(['--config', big], cmd),
      new RegExp(`--config ${big}: .*nEmbd 1000000000 exceeds the maximum 65536.*unknown key 'colour'`),
    );
  }
  const good = await write('good.json', '{"nLayer": 1, "schedule": "rewarm-cosine", "warmup": 10}');
  for (const argv of [['--config', good], ['--config', good, '--dp', '2']]) {
    const { cfg } = await checkCommand(argv, 'train');
    deepStrictEqual(
      [cfg?.nLayer, cfg?.rewarmStart, cfg?.rewarmFrom],
      [1, 0, 0],
      'a fresh re-warm starts at step 0 from LR 0',
    );
  }
  await Deno.remove(dir, { recursive: true });
});

Deno.test('booleans read --bias, --no-bias, --bias=false and --bias false; --help shows --bias / --no-bias', async () => {
  const bias = (argv: string[]) => parseTrainArgs(argv).overrides.bias;
  deepStrictEqual([
    bias(['--bias']),
    bias(['--no-bias']),
    bias(['--bias=false']),
    bias(['--bias=true']),
    bias(['--bias', 'false']),
    bias(['--bias', 'true']),
  ], [true, false, false, true, false, true]);
  equal(parseTrainArgs(['--bias', 'false', '--n-layer', '3']).overrides.nLayer, 3);
  equal(parseTrainArgs(['--data', 'true']).overrides.data, 'true', 'a string flag keeps its own value');
  throws(() => parseTrainArgs(['--bias=yes']), /--bias expects true or false \(or no value\), got 'yes'/);
  throws(() => parseTrainArgs(['--bias', '1']), /--bias expects true or false/);
  throws(() => parseTrainArgs(['--no-bias=true']), /--no-bias takes no value/);
  for (const cmd of ['train', 'plan'] as const) {
    equal((await checkCommand(['--sp', 'true', '--tp', '2'], cmd)).plan?.sp, true);
    equal((await checkCommand(['--sp=false', '--tp', '2'], cmd)).plan?.sp, false);
    equal((await checkCommand(['--bias', 'false', '--dp', '2'], cmd)).cfg?.bias, false);
  }
  equal(parseTrainArgs(['--resume=false']).resume, false, 'a boolean without --no- form is simply off');
  match(trainHelp(), /^ {2}--bias \/ --no-bias +true +biases in Linear layers$/m);
  match(trainHelp(), /^ {2}--n-embd +64 +\(max 65536\) +width C$/m);
});
