import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource as resource } from '../helpers/publish-bodies.js';
import { type ReadSide, readSide } from '../helpers/read-side.js';

/**
 * D26, D30: a write in one account leaves the other accounts' answers in memory. One account publishes
 * over HTTP, through the unit of work and the change follower as the service composes them; another
 * account's answers (its Catalogs, a page of its Resources, a detail) are still served from memory
 * afterwards, byte for byte, while the writer's own answers show its write.
 */
describe('tenancy: one account writes, the others keep their answers (D26, D30)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let reads: ReadSide;
  let app: FastifyInstance;
  let acme: Record<string, string>;
  let globex: Record<string, string>;
  let globexDetail: string;

  const CATALOG = '/v3/playbook/catalogs/org/handbook';
  const put = (url: string, payload: unknown, headers: Record<string, string>) =>
    app.inject({ method: 'PUT', url, headers, payload: payload as Record<string, unknown> });

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    reads = await readSide(backend.databases.reader, backend.content, { metrics: identity.metrics });
    app = await buildIdentityApp(backend, identity, undefined, { reads });
    await givenAccount(backend.databases.primary, 'acme');
    await givenAccount(backend.databases.primary, 'globex');
    const scopes = ['playbook:read', 'playbook:write'] as const;
    acme = (await identity.mintKey({ accountId: 'acme', scopes: [...scopes] })).headers;
    globex = (await identity.mintKey({ accountId: 'globex', scopes: [...scopes] })).headers;
    for (const headers of [acme, globex]) {
      const published = await put(
        CATALOG,
        { name: 'Handbook', version: '1', resources: [resource('intro'), resource('onboarding')] },
        headers,
      );
      expect(published.statusCode, published.body).toBe(201);
    }
    const page = await app.inject({ url: `${CATALOG}/resources`, headers: globex });
    globexDetail = `/v3/playbook/resources/${page.json().data[0].id}`;
  });

  afterAll(async () => {
    await app?.close();
    reads?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  const globexReads = () => ['/v3/playbook/catalogs', `${CATALOG}/resources`, globexDetail];

  /** Each of `urls` read as `headers`: the bodies, and how many of the reads were answered from memory. */
  async function readAll(urls: readonly string[], headers: Record<string, string>) {
    const before = reads.cache.stats;
    const bodies: string[] = [];
    for (const url of urls) {
      const res = await app.inject({ url, headers });
      expect(res.statusCode, url).toBe(200);
      bodies.push(res.body);
    }
    const after = reads.cache.stats;
    return { bodies, hits: after.hits - before.hits, misses: after.misses - before.misses };
  }

  it("a Resource published by one account leaves every answer of another in memory, and shows in the writer's own", async () => {
    await readAll(globexReads(), globex);
    const held = await readAll(globexReads(), globex);
    expect(held.hits).toBe(globexReads().length);
    expect(held.misses).toBe(1);
    const acmeBefore = await readAll([`${CATALOG}/resources`], acme);

    for (const version of ['2.0.0', '3.0.0']) {
      const written = await put(
        `${CATALOG}/resources/intro`,
        { ...resource('intro', { version, content: `# intro ${version}\n` }), slug: undefined },
        acme,
      );
      expect(written.statusCode, written.body).toBe(200);
      // The write has been followed here before it was answered (the unit of work announces it).
      const after = await readAll(globexReads(), globex);
      expect(after.bodies).toEqual(held.bodies);
      // As many lookups found what they looked for as before the write (an account's detail is looked
      // for under the service's key first, a miss every time).
      expect(after).toMatchObject({ hits: held.hits, misses: held.misses });
    }

    const acmeAfter = await readAll([`${CATALOG}/resources`], acme);
    expect(acmeAfter.misses).toBeGreaterThan(0);
    expect(acmeAfter.bodies[0]).not.toBe(acmeBefore.bodies[0]);
    expect(acmeAfter.bodies[0]).toContain('3.0.0');
  });

  it("the writer's own write drops its answers: the next read of its list is made afresh and shows it", async () => {
    await readAll([`${CATALOG}/resources`], acme);
    const held = await readAll([`${CATALOG}/resources`], acme);
    expect(held.hits).toBe(1);
    const written = await put(`${CATALOG}/resources/added`, { ...resource('added'), slug: undefined }, acme);
    expect(written.statusCode, written.body).toBe(201);
    const after = await readAll([`${CATALOG}/resources`], acme);
    expect(after.misses).toBe(1);
    expect(after.bodies[0]).toContain('"added"');
  });
});
