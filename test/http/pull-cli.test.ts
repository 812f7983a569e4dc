import fs from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readHead } from '../../src/changes/change-log.js';
import { DEMO_CATALOGS_DIR } from '../../src/composition/demo.js';
import { importTree } from '../../src/import/import-tree.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli, spawnCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { folderSnapshot } from '../helpers/folder-snapshot.js';
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

  /** Writes through the service as the account, and expects `status`. */
  async function put(url: string, payload: Record<string, unknown>, status: number) {
    const answer = await app.inject({ method: 'PUT', url, headers: writer, payload });
    expect(answer.statusCode, answer.body).toBe(status);
  }

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
    await put('/v3/playbook/catalogs/org/generated', body, 201);
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
    await put('/v3/playbook/catalogs/org/generated/resources/data', changed, 200);
    expect((await cli(['pull', 'org/generated', out])).code).toBe(0);
    expect(await read('data')).toMatchObject({ version: '2', content: '{"a": [3]}\n' });
    expect((await fs.stat(path.join(folder, 'files', 'large.md'))).mtimeMs).toBe(stamp);
  });

  it('removes only what it owns: the files of Resources gone, and content files no longer named (D27)', async () => {
    const folder = path.join(out, 'generated', 'resources');
    // A Resource file of a Resource the Catalog does not have, and the content file it names.
    const stray = { kind: 'document', title: 'Stray', version: '1', mediaType: 'text/markdown' };
    await fs.writeFile(
      path.join(folder, 'stray.json'),
      JSON.stringify({ ...stray, contentFile: 'files/stray.md' }),
    );
    await fs.writeFile(path.join(folder, 'files', 'stray.md'), 'left over');
    // Files that are not Resource files, and a file no Resource file names: not pull's to remove.
    await fs.writeFile(path.join(folder, 'package.json'), '{ "name": "kept" }');
    await fs.writeFile(path.join(folder, 'notes.json'), '{}');
    await fs.writeFile(path.join(folder, 'files', 'unrelated.md'), 'kept');
    // Content that moves inline: the content file its Resource file named goes.
    const { slug: _slug, ...small } = publishedResource('large', { version: '2', content: '# Small now\n' });
    await put('/v3/playbook/catalogs/org/generated/resources/large', small, 200);

    const pulled = await cli(['pull', 'org/generated', out]);
    expect(pulled, pulled.stderr).toMatchObject({ code: 0, stderr: '' });
    const names = await fs.readdir(folder);
    expect(names).not.toContain('stray.json');
    expect(names).toEqual(expect.arrayContaining(['package.json', 'notes.json', 'large.json']));
    expect(await fs.readFile(path.join(folder, 'package.json'), 'utf8')).toBe('{ "name": "kept" }');
    expect(JSON.parse(await fs.readFile(path.join(folder, 'large.json'), 'utf8'))).toMatchObject({
      content: '# Small now\n',
    });
    expect((await fs.readdir(path.join(folder, 'files'))).sort()).toEqual(['binary.bin', 'unrelated.md']);
    // Nothing left aside: every file was written in a staging folder and renamed into place.
    expect((await fs.readdir(out)).filter((name) => name.startsWith('.'))).toEqual([]);
  });

  describe('symbolic links in the folder it writes (D27)', () => {
    let tree: string;
    let elsewhere: string;

    beforeAll(async () => {
      await put(
        '/v3/playbook/catalogs/org/linked',
        { name: 'Linked', version: '1', resources: [publishedResource('one')] },
        201,
      );
    });
    beforeEach(async () => {
      tree = await fs.mkdtemp(path.join(backend.workDir, 'tree-'));
      elsewhere = await fs.mkdtemp(path.join(backend.workDir, 'elsewhere-'));
      await fs.mkdir(path.join(elsewhere, 'resources'));
      await fs.writeFile(path.join(elsewhere, 'package.json'), '{ "name": "kept" }');
      await fs.writeFile(
        path.join(elsewhere, 'resources', 'gone.json'),
        JSON.stringify(resourceFile('gone')),
      );
    });

    /** Pulls org/linked into `tree` and expects a refusal naming `link`, with nothing written anywhere. */
    async function expectRefused(link: string) {
      const before = { tree: await folderSnapshot(tree), elsewhere: await folderSnapshot(elsewhere) };
      const refused = await cli(['pull', 'org/linked', tree]);
      expect({ tree: await folderSnapshot(tree), elsewhere: await folderSnapshot(elsewhere) }).toEqual(
        before,
      );
      expect(refused.code, refused.stdout).toBe(1);
      expect(refused.stderr).toBe(
        `playbook: pull refused: ${link}: is a symbolic link; it must be a real ${link.endsWith('.json') ? 'file' : 'folder'}; the folder is left as it was\n`,
      );
    }

    it('refuses a Catalog folder that is a symbolic link', async () => {
      await fs.symlink(elsewhere, path.join(tree, 'linked'));
      await expectRefused('linked');
    });

    it('refuses resources/ and resources/files/ that are symbolic links', async () => {
      await fs.mkdir(path.join(tree, 'linked'));
      await fs.symlink(elsewhere, path.join(tree, 'linked', 'resources'));
      await expectRefused('linked/resources');
      await fs.rm(path.join(tree, 'linked', 'resources'));
      await fs.mkdir(path.join(tree, 'linked', 'resources'));
      await fs.symlink(elsewhere, path.join(tree, 'linked', 'resources', 'files'));
      await expectRefused('linked/resources/files');
    });

    it('refuses a file it would write or remove that is a symbolic link', async () => {
      const resources = path.join(tree, 'linked', 'resources');
      await fs.mkdir(resources, { recursive: true });
      await fs.symlink(path.join(elsewhere, 'package.json'), path.join(resources, 'one.json'));
      await expectRefused('linked/resources/one.json');
      await fs.rm(path.join(resources, 'one.json'));
      // A Resource file the Catalog does not have: one pull would remove.
      await fs.symlink(path.join(elsewhere, 'resources', 'gone.json'), path.join(resources, 'gone.json'));
      await expectRefused('linked/resources/gone.json');
      await fs.rm(path.join(resources, 'gone.json'));
      await fs.symlink(path.join(elsewhere, 'package.json'), path.join(tree, 'linked', 'catalog.json'));
      await expectRefused('linked/catalog.json');
    });

    it('writes aside under names no one can make first', async () => {
      // A link where a file written aside under a guessable name would go is never written through.
      const resources = path.join(tree, 'linked', 'resources');
      await fs.mkdir(resources, { recursive: true });
      const victim = path.join(elsewhere, 'package.json');
      for (const name of ['one.json', 'catalog.json']) {
        const folder = name === 'one.json' ? resources : path.dirname(resources);
        await fs.symlink(victim, path.join(folder, `${name}.${process.pid}.partial`));
      }
      const pulled = await cli(['pull', 'org/linked', tree]);
      expect(pulled, pulled.stderr).toMatchObject({ code: 0, stderr: '' });
      expect(await fs.readFile(victim, 'utf8')).toBe('{ "name": "kept" }');
      expect(JSON.parse(await fs.readFile(path.join(resources, 'one.json'), 'utf8'))).toMatchObject({
        title: 'The one',
      });
    });
  });

  it('refuses what it cannot do: a bad ref or no key is bad usage, a Catalog it cannot read a failure', async () => {
    expect((await cli(['pull', 'handbook', out])).code).toBe(2);
    expect((await cli(['pull', 'org/Not_A_Slug', out])).code).toBe(2);
    expect((await cli(['pull', `org/${'a'.repeat(121)}`, out])).code).toBe(2);
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
