import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenCatalogVersion, givenResource } from '../helpers/fixtures.js';

class Capture extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString('utf8');
    done();
  }
}

/** What terminals act upon, stored in a Resource: a C1 control and a right-to-left override. */
const UNPRINTABLE = 'Intro \u009b2J and \u202eevil';

/**
 * D29: `playbook get <owner>/<catalogSlug>[/<resourceSlug>]` against a running service, with the
 * service from PLAYBOOK_URL and the key from PLAYBOOK_API_KEY.
 */
describe('playbook get (D29)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let baseUrl: string;
  let key: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    baseUrl = await listenLocally(app);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'free');
    await givenAccount(db, 'globex', 'free');
    key = (await identity.mintKey({ accountId: 'acme' })).key;
    const handbook = await givenCatalog(db, { slug: 'handbook' });
    const intro = await givenResource(backend, handbook, {
      slug: 'intro',
      title: 'Intro',
      versions: [{ version: '1', content: `# ${UNPRINTABLE}\nsecond line\n` }],
    });
    await givenResource(backend, handbook, { slug: 'pro-only', facets: { planAccess: ['pro'] } });
    await givenCatalogVersion(db, handbook, '1', [intro]);
    const runbooks = await givenCatalog(db, { slug: 'runbooks', accountId: 'acme' });
    await givenResource(backend, runbooks, { slug: 'restart' });
    await givenCatalog(db, { slug: 'secrets', accountId: 'globex' });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  async function get(
    args: string[],
    env: Record<string, string> = { PLAYBOOK_API_KEY: key, PLAYBOOK_URL: baseUrl },
  ) {
    const stdout = new Capture();
    const stderr = new Capture();
    const code = await main(
      ['node', 'playbook', 'get', ...args],
      { ...backend.env, ...env },
      { stdout, stderr },
    );
    return { code, stdout: stdout.text, stderr: stderr.text };
  }
  const served = async (url: string) => (await app.inject({ url, headers: { 'x-api-key': key } })).json();

  it("prints a Catalog as the service answers it, as JSON, the key's account's under org", async () => {
    const result = await get(['svc/handbook']);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(result.stdout)).toEqual(await served('/v3/playbook/catalogs/svc/handbook'));
    expect(result.stdout).toMatch(/^\{\n {2}"id": /);
    const own = await get(['org/runbooks']);
    expect(own.code).toBe(0);
    expect(JSON.parse(own.stdout)).toMatchObject({ humanRef: 'org/runbooks', owner: 'org' });
  });

  it('prints a Resource with its content, terminal controls escaped and the JSON still whole', async () => {
    const result = await get(['svc/handbook/intro']);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(result.stdout).not.toMatch(/[\u009b\u202e]/);
    expect(result.stdout).toContain('\\u009b2J and \\u202eevil');
    const printed = JSON.parse(result.stdout);
    expect(printed).toEqual(await served('/v3/playbook/catalogs/svc/handbook/resources/intro'));
    expect(printed.currentVersion.content).toBe(`# ${UNPRINTABLE}\nsecond line\n`);
  });

  it("exits 1 with the problem: another account's Catalog is 404, a plan-gated Resource 403, a bad slug 400", async () => {
    const missing = await get(['org/secrets']);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expect(missing.stderr).toBe('playbook: get failed: 404 not_found: catalog org/secrets not found\n');
    const gated = await get(['svc/handbook/pro-only']);
    expect(gated.code).toBe(1);
    expect(gated.stderr).toMatch(/^playbook: get failed: 403 plan_required: /);
    const invalid = await get(['svc/Handbook']);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toMatch(/^path catalogSlug: .+\nplaybook: get failed: 400 invalid_request: /);
  });

  it('exits 1 naming the service it could not reach, and never the key', async () => {
    // A port that was free a moment ago: nothing listens there.
    const probe = http.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const result = await get(['svc/handbook'], {
      PLAYBOOK_API_KEY: key,
      PLAYBOOK_URL: `http://127.0.0.1:${port}/base?token=secret`,
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      new RegExp(
        `^playbook: get failed: network_error: .*\\(PLAYBOOK_URL is http://127\\.0\\.0\\.1:${port}\\)\\n$`,
      ),
    );
    expect(result.stderr).not.toContain(key.split('_')[4]);
    expect(result.stderr).not.toContain('secret');
  }, 30_000);

  it('exits 2 on bad usage: a ref of another shape, no key, a key that does not hold, a URL not http(s), a key as a flag', async () => {
    for (const ref of ['handbook', 'acme/handbook', 'svc/handbook/intro/more', 'svc//intro']) {
      const result = await get([ref]);
      expect(result.code, ref).toBe(2);
      expect(result.stderr, ref).toContain('is not a ref');
    }
    const noKey = await get(['svc/handbook'], { PLAYBOOK_URL: baseUrl });
    expect(noKey).toMatchObject({ code: 2 });
    expect(noKey.stderr).toContain('PLAYBOOK_API_KEY must hold an API key');
    const forged = await get(['svc/handbook'], {
      PLAYBOOK_API_KEY: `${key.slice(0, -1)}#`,
      PLAYBOOK_URL: baseUrl,
    });
    expect(forged.code).toBe(2);
    expect(forged.stderr).toContain('PLAYBOOK_API_KEY is not a valid API key');
    expect(forged.stderr).not.toContain(key.slice(20));
    for (const url of ['ftp://127.0.0.1', 'not a url', `http://user:secret@127.0.0.1:1`]) {
      const result = await get(['svc/handbook'], { PLAYBOOK_API_KEY: key, PLAYBOOK_URL: url });
      expect(result.code, url).toBe(2);
      expect(result.stderr, url).toContain('PLAYBOOK_URL must be an http(s) URL');
      expect(result.stderr, url).not.toContain('secret');
    }
    expect((await get(['svc/handbook', '--api-key', key])).code).toBe(2);
  });

  it('says in its help where it looks for the service and the key', async () => {
    const help = await get(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('PLAYBOOK_URL      where the service is (default http://127.0.0.1:8080)');
    expect(help.stdout).toContain('PLAYBOOK_API_KEY');
  });
});
