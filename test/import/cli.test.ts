import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { catalogJson, dumpStorage, newTreeDir, resourceJson, writeTree } from './support.js';

let backend: TestBackend;
let dir: string;
beforeEach(async () => {
  backend = await createTestBackend();
  dir = await newTreeDir(backend);
  await writeTree(dir, {
    'handbook/catalog.json': catalogJson(),
    'handbook/resources/onboarding.json': resourceJson(),
  });
});
afterEach(async () => {
  await backend.cleanup();
});

/** Runs `playbook …args` against the test backend and collects what it printed. */
async function playbook(...args: string[]) {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: string[] = [];
  const err: string[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk.toString()));
  stderr.on('data', (chunk: Buffer) => err.push(chunk.toString()));
  const code = await main(
    ['node', 'playbook', ...args],
    { ...backend.env, LOG_LEVEL: 'silent' },
    { stdout, stderr },
  );
  return { code, stdout: out.join(''), stderr: err.join('') };
}

async function catalogCount(): Promise<number> {
  const rows = await backend.databases.primary.selectFrom('catalogs').select('id').execute();
  return rows.length;
}

describe('playbook import (D14, D15)', () => {
  it('imports a tree as the service: exit 0, the changes and a summary on stdout', async () => {
    const result = await playbook('import', dir, '--owner', 'svc');
    expect(result).toEqual({
      code: 0,
      stdout: [
        '+ catalog svc/handbook (active): "Engineering handbook"',
        '+ resource svc/handbook/onboarding (document, active): version 1.0.0 published, 13 bytes in database-text',
        '+ catalog version svc/handbook 1.0.0: 1 pin',
        'import: created 1 catalog, 1 resource, 1 resource version; published 1 catalog version (read 1 catalog, 1 resource file)',
        '',
      ].join('\n'),
      stderr: '',
    });
    expect(await catalogCount()).toBe(1);

    const again = await playbook('import', dir, '--owner', 'svc');
    expect(again.code).toBe(0);
    expect(again.stdout).toBe('import: nothing to change (read 1 catalog, 1 resource file)\n');
  });

  it('imports into an account, creating it', async () => {
    const result = await playbook('import', dir, '--account', 'acme');
    expect(result.code).toBe(0);
    expect(result.stdout.split('\n')[0]).toBe('+ account acme (plan free)');
    const catalog = await backend.databases.primary
      .selectFrom('catalogs')
      .selectAll()
      .executeTakeFirstOrThrow();
    expect(catalog.account_id).toBe('acme');
  });

  it('--dry-run reports what would change and writes nothing', async () => {
    await playbook('migrate');
    const before = await dumpStorage(backend);
    const result = await playbook('import', dir, '--owner', 'svc', '--dry-run');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('+ catalog svc/handbook (active): "Engineering handbook"\n');
    expect(result.stdout).toMatch(/\ndry run, nothing written: would have created 1 catalog, 1 resource/);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('exits 1 with every problem on stderr and nothing written when the tree is invalid', async () => {
    await writeTree(dir, {
      'handbook/resources/bad.json': resourceJson({ title: '' }),
      'handbook/resources/worse.json': resourceJson({ kind: 'essay' }),
    });
    await playbook('migrate');
    const before = await dumpStorage(backend);
    const result = await playbook('import', dir, '--owner', 'svc');
    expect(result).toEqual({
      code: 1,
      stdout: '',
      stderr: [
        'handbook/resources/bad.json: title: must not be empty',
        'handbook/resources/worse.json: kind: must be one of document, topic, reference, team-member, workflow, lifecycle, integration, policy',
        'playbook: import refused: 2 problems',
        '',
      ].join('\n'),
    });
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('exits 1 on a refused change of an immutable label', async () => {
    expect((await playbook('import', dir, '--owner', 'svc')).code).toBe(0);
    await writeTree(dir, {
      'handbook/resources/onboarding.json': resourceJson({ content: 'edited in place' }),
    });
    const result = await playbook('import', dir, '--owner', 'svc');
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^handbook\/resources\/onboarding\.json: version: content changed but the version "1\.0\.0" did not; .*\nplaybook: import refused: 1 problem\n$/,
    );
  });

  it.each([
    ['neither --owner nor --account', ['import', 'DIR']],
    ['both --owner and --account', ['import', 'DIR', '--owner', 'svc', '--account', 'acme']],
    ['an owner other than svc', ['import', 'DIR', '--owner', 'acme']],
    ['no directory', ['import', '--owner', 'svc']],
    ['an unknown option', ['import', 'DIR', '--owner', 'svc', '--force']],
  ])('exits 2 on bad usage: %s', async (_case, args) => {
    const result = await playbook(...args.map((arg) => (arg === 'DIR' ? dir : arg)));
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(await catalogCount()).toBe(0);
  });
});
