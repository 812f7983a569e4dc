import fs from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readHead } from '../../src/changes/change-log.js';
import { DEMO_CATALOGS_DIR } from '../../src/composition/demo.js';
import { importTree } from '../../src/import/import-tree.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli, spawnCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { importService, resourceFile } from '../helpers/sync-feed.js';

/**
 * D27: `playbook pull <owner>/<catalogSlug> <dir> [--follow]` against a running server, on both stacks.
 * A pulled folder published again writes nothing (every Resource unchanged, no change appended to the
 * log), on the demo catalogs and on a generated one with large and binary-ish content; `--follow`
 * keeps the folder current, removing the files of Resources that left.
 */

/** The publish command's last line when nothing changed. */
const unchanged = (slug: string, count: number) =>
  `org/${slug}: 0 created, 0 updated, 0 superseded, 0 archived, ${count} unchanged`;

describe('playbook pull (D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let key: string;
  let writer: Record<string, string>;
  let out: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    await givenAccount(backend.databases.primary, 'demo');
    const minted = await identity.mintKey({ accountId: 'demo', scopes: ['playbook:read', 'playbook:write'] });
    key = minted.key;
    writer = minted.headers;
    out = path.join(backend.workDir, 'pulled');
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const env = (extra: Record<string, string> = {}) => ({
    ...backend.env,
    PLAYBOOK_URL: baseUrl,
    PLAYBOOK_API_KEY: key,
    ...extra,
  });
  const cli = (args: string[], extra: Record<string, string> = {}) => runCli(args, env(extra));

  /** Pulls a Catalog of the account, publishes the folder back, and expects nothing written. */
  async function expectRoundTrip(slug: string, count: number) {
    const pulled = await cli(['pull', `org/${slug}`, out]);
    expect(pulled, pulled.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(pulled.stdout).toBe(
      `pulled org/${slug} into ${path.join(out, slug)}: ${count} resource${count === 1 ? '' : 's'}\n`,
    );
    const head = await readHead(backend.databases.primary);
    const published = await cli(['publish', path.join(out, slug)]);
    expect(published, published.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(published.stdout.trim().split('\n')).toEqual([unchanged(slug, count)]);
    expect(await readHead(backend.databases.primary)).toBe(head);
  }

  it('pull then publish writes nothing, for each demo catalog published into an account', async () => {
    await importTree(
      { db: backend.databases.primary, objectStore: backend.objectStore, writes: identity.writes },
      { dir: DEMO_CATALOGS_DIR, owner: { kind: 'account', accountId: 'demo' } },
    );
    const slugs = (await fs.readdir(DEMO_CATALOGS_DIR)).sort();
    expect(slugs).toHaveLength(4);
    for (const slug of slugs) {
      const resources = (await fs.readdir(path.join(DEMO_CATALOGS_DIR, slug, 'resources'))).filter((name) =>
        name.endsWith('.json'),
      );
      await expectRoundTrip(slug, resources.length);
    }
    // The demo's large content went to a file beside its JSON, the rest inline.
    const files = await fs.readdir(out, { recursive: true });
    expect(files.filter((name) => name.includes(`${path.sep}files${path.sep}`)).length).toBeGreaterThan(0);
  });

  it('pull then publish writes nothing for large, binary-ish, JSON and draft or archived content', async () => {
    const large = `# Large\n\n${'A line of a large runbook.\n'.repeat(4000)}`;
    const binaryish = `\u0001\u0002PK\u0003\u0004${'\u00ff\u00fe'.repeat(50)}\u0007end`;
    const body = {
      name: 'Generated',
      version: '1',
      description: 'Made by a test\nover two lines',
      facets: { capability: ['testing'], technology: ['node'] },
      resources: [
        publishedResource('large', { content: large }),
        publishedResource('binary', { mediaType: 'application/octet-stream', content: binaryish }),
        publishedResource('data', { mediaType: 'application/json', content: '{"a": [1, 2]}\n' }),
        publishedResource('manifested', {
          manifest: { steps: [{ id: 's1', timeout: 30 }], owner: 'team', __proto__: 'data' },
          facets: { channel: ['stable'] },
          description: 'With a manifest',
          kind: 'workflow',
        }),
        publishedResource('in-progress', { status: 'draft' }),
        publishedResource('retired', { status: 'archived' }),
        publishedResource('small-object', { storageBackend: 'object-storage', content: 'tiny\n' }),
      ],
    };
    const made = await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/generated',
      headers: writer,
      payload: body,
    });
    expect(made.statusCode, made.body).toBe(201);
    await expectRoundTrip('generated', 7);
    const folder = path.join(out, 'generated', 'resources');
    const read = async (name: string) =>
      JSON.parse(await fs.readFile(path.join(folder, `${name}.json`), 'utf8'));
    expect(await read('large')).toMatchObject({
      contentFile: 'files/large.md',
      storageBackend: 'object-storage',
    });
    expect(await fs.readFile(path.join(folder, 'files', 'large.md'), 'utf8')).toBe(large);
    expect(await read('binary')).toMatchObject({ contentFile: 'files/binary.bin' });
    expect(await fs.readFile(path.join(folder, 'files', 'binary.bin'), 'utf8')).toBe(binaryish);
    expect(await read('data')).toMatchObject({ content: '{"a": [1, 2]}\n', mediaType: 'application/json' });
    expect(await read('manifested')).toMatchObject({
      kind: 'workflow',
      manifest: { steps: [{ id: 's1', timeout: 30 }], owner: 'team' },
      facets: { channel: ['stable'] },
    });
    expect(await read('in-progress')).toMatchObject({ status: 'draft' });
    expect(await read('retired')).toMatchObject({ status: 'archived' });
    expect(JSON.parse(await fs.readFile(path.join(out, 'generated', 'catalog.json'), 'utf8'))).toEqual({
      name: 'Generated',
      version: '1',
      status: 'active',
      description: 'Made by a test\nover two lines',
      facets: { capability: ['testing'], technology: ['node'] },
    });

    // Pulled again after a change: the folder follows, and a Resource gone from the Catalog's body
    // (archived) keeps its file, archived; nothing else is rewritten.
    const stamp = (await fs.stat(path.join(folder, 'files', 'large.md'))).mtimeMs;
    const { slug: _slug, ...changed } = publishedResource('data', {
      mediaType: 'application/json',
      version: '2',
      content: '{"a": [3]}\n',
    });
    const put = await app.inject({
      method: 'PUT',
      url: '/v3/playbook/catalogs/org/generated/resources/data',
      headers: writer,
      payload: changed,
    });
    expect(put.statusCode, put.body).toBe(200);
    expect((await cli(['pull', 'org/generated', out])).code).toBe(0);
    expect(await read('data')).toMatchObject({ version: '2', content: '{"a": [3]}\n' });
    expect((await fs.stat(path.join(folder, 'files', 'large.md'))).mtimeMs).toBe(stamp);
  });

  it('removes the files of Resources the Catalog no longer has, and of content now inline', async () => {
    const folder = path.join(out, 'generated', 'resources');
    await fs.writeFile(path.join(folder, 'stray.json'), '{}');
    await fs.writeFile(path.join(folder, 'files', 'stray.md'), 'left over');
    expect((await cli(['pull', 'org/generated', out])).code).toBe(0);
    const names = await fs.readdir(folder);
    expect(names).not.toContain('stray.json');
    expect(await fs.readdir(path.join(folder, 'files'))).toEqual(['binary.bin', 'large.md']);
  });

  it('refuses what it cannot do: a bad ref or no key is bad usage, a Catalog it cannot read a failure', async () => {
    expect((await cli(['pull', 'handbook', out])).code).toBe(2);
    expect((await cli(['pull', 'org/Not_A_Slug', out])).code).toBe(2);
    const noKey = await runCli(['pull', 'org/generated', out], { ...backend.env, PLAYBOOK_URL: baseUrl });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toMatch(/PLAYBOOK_API_KEY must hold an API key/);
    const missing = await cli(['pull', 'svc/nowhere', out]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('playbook: pull failed: no Catalog svc/nowhere that this key can read\n');
    const readOnly = (await identity.mintKey({ accountId: 'demo', scopes: ['playbook:write'] })).key;
    const refused = await cli(['pull', 'org/generated', out], { PLAYBOOK_API_KEY: readOnly });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/pull failed: .*403 forbidden/);
  });

  it('--follow keeps the folder current: changes written, the files of a Resource that left removed', async () => {
    await importService(backend, identity, {
      runbooks: {
        catalog: { name: 'Runbooks', version: '1' },
        resources: { restart: resourceFile('restart'), rollback: resourceFile('rollback') },
      },
    });
    const followed = spawnCli(['pull', 'svc/runbooks', out, '--follow'], env());
    try {
      await followed.waitFor((text) => text.includes('pulled svc/runbooks'));
      const folder = path.join(out, 'runbooks', 'resources');
      expect((await fs.readdir(folder)).sort()).toEqual(['restart.json', 'rollback.json']);
      await importService(backend, identity, {
        runbooks: {
          catalog: { name: 'Runbooks', version: '2' },
          resources: {
            restart: resourceFile('restart', { version: '2', content: '# Restart, again\n' }),
            rollback: resourceFile('rollback', { status: 'draft' }),
            drain: resourceFile('drain'),
          },
        },
      });
      const lines = [
        '~ svc/runbooks: catalog.json',
        '~ svc/runbooks/restart: resources/restart.json',
        '- svc/runbooks/rollback: resources/rollback.json',
        '+ svc/runbooks/drain: resources/drain.json',
      ];
      await followed.waitFor((text) => lines.every((line) => text.includes(line)));
      expect((await fs.readdir(folder)).sort()).toEqual(['drain.json', 'restart.json']);
      expect(JSON.parse(await fs.readFile(path.join(folder, 'restart.json'), 'utf8'))).toMatchObject({
        version: '2',
        content: '# Restart, again\n',
      });
      followed.child.kill('SIGTERM');
      expect(await followed.exited).toEqual({ code: 0, signal: null });
      expect(followed.stderr()).toBe('');
    } finally {
      followed.child.kill('SIGKILL');
    }
  });
});
