/**
 * How tests/cli/doc_commands*.test.ts read a guide: which fences hold commands, where a comment
 * starts, and where added flags go.
 */
import { deepEqual, equal, throws } from 'node:assert/strict';
import { docCommands, stripComment, withFlags } from '../util/doc_commands.ts';

Deno.test('docCommands: lines of sh/bash/shell/console fences, comments and blank lines dropped, others ignored', () => {
  const md = [
    'text `npm run inline` is prose',
    '```sh',
    'npm run train -- --steps 2   # a comment',
    '',
    '# a whole-line comment',
    'npm run plan -- --model \'a=1#b\' --x "y # z"',
    '```',
    '```ts',
    'const notACommand = 1;',
    '```',
    '```',
    'untagged block',
    '```',
    '```bash',
    'mpirun -n 2 npm run train',
    '```',
  ].join('\n');
  deepEqual(docCommands('G.md', md), [
    { file: 'G.md', line: 3, command: 'npm run train -- --steps 2' },
    { file: 'G.md', line: 6, command: 'npm run plan -- --model \'a=1#b\' --x "y # z"' },
    { file: 'G.md', line: 15, command: 'mpirun -n 2 npm run train' },
  ]);
  throws(() => docCommands('G.md', '```sh\nnpm test\n'), /G\.md:1: a code fence that never closes/);
});

Deno.test('stripComment: a # after whitespace outside quotes starts a comment; a#b and quoted # do not', () => {
  equal(stripComment('a --x=1#2 # c'), 'a --x=1#2 ');
  equal(stripComment("a '# not' # yes"), "a '# not' ");
  equal(stripComment('# all'), '');
});

Deno.test('withFlags: appends to the named && part, adding -- where that npm run has none', () => {
  equal(withFlags('npm install && npm run train', ['--steps', '2']), 'npm install && npm run train -- --steps 2');
  equal(withFlags('npm run plan -- --dp 2', ['--x', 'a b']), "npm run plan -- --dp 2 --x 'a b'");
  equal(withFlags('npm run a && npm run b -- --c', ['--q'], 0), 'npm run a -- --q && npm run b -- --c');
  equal(
    withFlags('mpirun -n 4 npm run train -- --dp 2', ['--steps', '2']),
    'mpirun -n 4 npm run train -- --dp 2 --steps 2',
  );
  equal(withFlags('npm test', []), 'npm test');
  throws(() => withFlags('bash x.sh', ['--q']), /no npm run there/);
});
