import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { runCli } from '../helpers/cli.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { freePort } from '../helpers/servers.js';
import { catalogJson, newTreeDir, resourceJson, writeTree } from '../import/support.js';

/** D23: `playbook publish <catalogDir> --url <baseUrl> [--dry-run]`, walked against a running server. */
describe('playbook publish (D23)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let key: string;
  let folder: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    await givenAccount(backend.databases.primary, 'acme');
    key = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] })).key;
    const tree = await newTreeDir(backend);
    await writeTree(tree, {
      'handbook/catalog.json': catalogJson({ version: '1' }),
      'handbook/resources/intro.json': resourceJson({ title: 'Intro', content: '# Intro\n' }),
      'handbook/resources/guide.json': resourceJson({
        title: 'Guide',
        content: undefined,
        contentFile: 'files/guide.md',
      }),
      'handbook/resources/files/guide.md': '# Guide\n\nFrom a content file.\n',
      'other/catalog.json': catalogJson(),
    });
    folder = path.join(tree, 'handbook');
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const publish = (args: string[], env: Record<string, string> = { PLAYBOOK_API_KEY: key }) =>
    runCli(['publish', ...args], { ...backend.env, ...env });
  const listed = async () =>
    (
      await app.inject({ url: '/v3/playbook/catalogs/org/handbook/resources', headers: { 'x-api-key': key } })
    ).json();

  it('--dry-run prints the change report and writes nothing', async () => {
    const result = await publish([folder, '--url', baseUrl, '--dry-run']);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(result.stdout).toContain('+ resource org/handbook/guide (document, active)');
    expect(result.stdout.trim().split('\n').at(-1)).toBe(
      'dry run of org/handbook: 2 created, 0 updated, 0 superseded, 0 archived, 0 unchanged; nothing was written',
    );
    expect(
      (
        await app.inject({
          url: '/v3/playbook/catalogs/org/handbook/resources',
          headers: { 'x-api-key': key },
        })
      ).statusCode,
    ).toBe(404);
  });

  it("publishes the folder (content files included) as the key's account, then finds nothing to change", async () => {
    const result = await publish([folder, '--url', baseUrl]);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(result.stdout.trim().split('\n').at(-1)).toBe(
      'org/handbook: 2 created, 0 updated, 0 superseded, 0 archived, 0 unchanged',
    );
    const resources = await listed();
    expect(resources.data.map((r: { slug: string }) => r.slug)).toEqual(['guide', 'intro']);
    const guide = resources.data[0];
    const detail = (
      await app.inject({ url: `/v3/playbook/resources/${guide.id}`, headers: { 'x-api-key': key } })
    ).json();
    expect(detail.currentVersion.content).toBe('# Guide\n\nFrom a content file.\n');
    const again = await publish([folder, '--url', baseUrl]);
    expect(again.stdout.trim()).toBe(
      'org/handbook: 0 created, 0 updated, 0 superseded, 0 archived, 2 unchanged',
    );
  });

  it('reads the service from PLAYBOOK_URL when --url is not given; --url wins over it (D29)', async () => {
    const fromEnv = await publish([folder, '--dry-run'], { PLAYBOOK_API_KEY: key, PLAYBOOK_URL: baseUrl });
    expect(fromEnv).toMatchObject({ code: 0, stderr: '' });
    expect(fromEnv.stdout.trim().split('\n').at(-1)).toMatch(/^dry run of org\/handbook: /);
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    const flag = await publish([folder, '--dry-run', '--url', baseUrl], {
      PLAYBOOK_API_KEY: key,
      PLAYBOOK_URL: nowhere,
    });
    expect(flag).toMatchObject({ code: 0, stderr: '' });
    const bad = await publish([folder], { PLAYBOOK_API_KEY: key, PLAYBOOK_URL: 'ftp://x' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('PLAYBOOK_URL must be an http(s) URL');
    const none = await publish([folder], { PLAYBOOK_API_KEY: key });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('give --url, or set PLAYBOOK_URL');
  });

  it("exits 1 with the problem's detail when the service refuses, and writes nothing", async () => {
    await writeTree(folder, {
      'resources/intro.json': resourceJson({ title: 'Intro', content: '# Changed\n' }),
    });
    const result = await publish([folder, '--url', baseUrl]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^playbook: publish failed: 409 version_label_taken: .*content changed but the version "1.0.0" did not/m,
    );
    const refused = await publish([folder, '--url', baseUrl], {
      PLAYBOOK_API_KEY: (await identity.mintKey({ accountId: 'acme' })).key,
    });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      'playbook: publish failed: 403 forbidden: this operation needs the playbook:write scope\n',
    );
    await writeTree(folder, {
      'resources/intro.json': resourceJson({ title: 'Intro', content: '# Intro\n' }),
    });
  });

  it('exits 1 listing the problems of an invalid folder, and 2 without a key or a URL', async () => {
    await writeTree(folder, { 'resources/broken.json': '{ not json' });
    const invalid = await publish([folder, '--url', baseUrl]);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toContain('handbook/resources/broken.json: is not valid JSON');
    const missing = await publish([path.join(folder, 'nowhere'), '--url', baseUrl]);
    expect(missing.code).toBe(1);
    expect((await publish([folder, '--url', baseUrl], {})).code).toBe(2);
    expect((await publish([folder])).code).toBe(2);
    expect((await publish([folder, '--url', 'ftp://x'])).code).toBe(2);
    const forged = await publish([folder, '--url', baseUrl], { PLAYBOOK_API_KEY: `${key.slice(0, -1)}#` });
    expect(forged.code).toBe(2);
    expect(forged.stderr).not.toContain(key.slice(20));
  });
});
