import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

/**
 * D24: the package as this repository's own code imports it, and the example that uses it. The
 * package as a user installs it, packed, is published-package.test.ts's.
 */
describe('@playbook/client in this repository (D24)', () => {
  beforeAll(async () => {
    await run('npm', ['run', 'build', '--workspace', '@playbook/client'], { cwd: ROOT });
  }, 120_000);

  it('is importable by name, as a dependent project imports it', async () => {
    const client = await import('@playbook/client');
    expect(Object.keys(client).sort()).toEqual([
      'MemoryCache',
      'Playbook',
      'PlaybookError',
      'PlaybookSync',
      'WebhookVerificationError',
      'isLoopbackUrl',
      'parseApiKey',
      'signInForDevelopment',
      'verifyWebhook',
    ]);
    expect(client.parseApiKey('not a key')).toBeNull();
  });

  describe('examples/mirror-catalogs.mjs', () => {
    let backend: TestBackend;
    let identity: TestIdentity;
    let app: FastifyInstance;
    let baseUrl: string;
    let out: string;

    beforeAll(async () => {
      backend = await createTestBackend();
      identity = createTestIdentity(backend);
      app = await buildIdentityApp(backend, identity);
      baseUrl = await listenLocally(app);
      await givenAccount(backend.databases.primary, 'acme');
      const handbook = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
      await givenResource(backend, handbook, { slug: 'onboarding' });
      await givenResource(backend, handbook, {
        slug: 'escalation',
        versions: [{ version: '1.0.0', content: '# escalation\n\nPage the on-call.\n' }],
      });
      const runbooks = await givenCatalog(backend.databases.primary, { slug: 'runbooks', accountId: 'acme' });
      await givenResource(backend, runbooks, { slug: 'restart' });
      out = path.join(backend.workDir, 'mirror');
    });
    afterAll(async () => {
      await app.close();
      await identity.close();
      await backend.cleanup();
    });

    it("mirrors every Catalog's Resources into a folder", async () => {
      const { key } = await identity.mintKey({ accountId: 'acme' });
      const { stdout } = await run('node', [path.join(ROOT, 'examples/mirror-catalogs.mjs'), out], {
        cwd: ROOT,
        env: { ...process.env, PLAYBOOK_API_KEY: key, PLAYBOOK_URL: baseUrl },
      });
      expect(stdout).toBe(`mirrored 3 resources into ${out}\n`);
      const files = (await fs.readdir(out, { recursive: true })).map(String).sort();
      expect(files).toEqual(
        [
          'org',
          'org/runbooks',
          'org/runbooks/restart.md',
          'svc',
          'svc/handbook',
          'svc/handbook/escalation.md',
          'svc/handbook/onboarding.md',
        ].map((file) => file.split('/').join(path.sep)),
      );
      expect(await fs.readFile(path.join(out, 'svc/handbook/escalation.md'), 'utf8')).toBe(
        '# escalation\n\nPage the on-call.\n',
      );
    });

    it('with --follow, keeps the mirror current through the sync feed until stopped (D27)', async () => {
      const { key } = await identity.mintKey({
        accountId: 'acme',
        scopes: ['playbook:read', 'playbook:write'],
      });
      const followed = path.join(backend.workDir, 'followed');
      const child = spawn('node', [path.join(ROOT, 'examples/mirror-catalogs.mjs'), followed, '--follow'], {
        cwd: ROOT,
        env: { ...process.env, PLAYBOOK_API_KEY: key, PLAYBOOK_URL: baseUrl },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      const until = (what: string, probe: () => Promise<boolean> | boolean) =>
        waitFor(what, probe, 10_000, () => `stdout:\n${stdout}`);
      try {
        await until('the initial sync', () => stdout.includes('following changes'));
        expect(stdout).toContain(`mirrored 3 resources into ${followed}\n`);
        const written = await app.inject({
          method: 'PUT',
          url: '/v3/playbook/catalogs/org/runbooks/resources/rollback',
          headers: { 'x-api-key': key },
          payload: {
            kind: 'document',
            title: 'Rollback',
            version: '1',
            mediaType: 'text/markdown',
            content: '# Rollback\n',
          },
        });
        expect(written.statusCode, written.body).toBe(201);
        const file = path.join(followed, 'org', 'runbooks', 'rollback.md');
        await until(
          'the new resource in the mirror',
          async () => (await fs.readFile(file, 'utf8').catch(() => '')) === '# Rollback\n',
        );
        expect(stdout).toContain('~ org/runbooks/rollback\n');
        child.kill('SIGTERM');
        expect(await exited).toBe(0);
      } finally {
        child.kill('SIGKILL');
      }
    });

    it('exits 1 with the problem when the key is refused', async () => {
      const { key } = await identity.mintKey({ accountId: 'acme' });
      await identity.keys.revoke(key.split('_')[3]!);
      const failed = await run('node', [path.join(ROOT, 'examples/mirror-catalogs.mjs'), out], {
        env: { ...process.env, PLAYBOOK_API_KEY: key, PLAYBOOK_URL: baseUrl },
      }).catch((error: { code: number; stderr: string }) => error);
      expect(failed).toMatchObject({ code: 1 });
      expect((failed as { stderr: string }).stderr).toMatch(
        /^mirror failed: 401 unauthenticated: the API key has been revoked/,
      );
    });
  });
});
