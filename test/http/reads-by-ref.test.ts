import fs from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/program.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkCatalog, checkProblem, checkResourceDetail, problemOf } from '../helpers/contract.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import {
  type GivenResource,
  givenAccount,
  givenCatalog,
  givenCatalogVersion,
  givenResource,
} from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { followNow, type ReadSide, readSide } from '../helpers/read-side.js';

/**
 * D29: one Catalog and one Resource by their human refs, under the rules of the reads by id: path
 * parameters (D4), visibility (D5), plans (D6), scopes (D7), ETags, 304 and compression (D11, D19),
 * HEAD, rate limits (D10), and answers held in memory for their audience until their namespace
 * changes (D26).
 */

class Discard extends Writable {
  override _write(_chunk: Buffer, _encoding: string, done: () => void): void {
    done();
  }
}

const CATALOGS = '/v3/playbook/catalogs';
const catalogUrl = (ref: string) => `${CATALOGS}/${ref}`;
const resourceUrl = (catalogRef: string, slug: string) => `${CATALOGS}/${catalogRef}/resources/${slug}`;

describe('reads by human ref (D29)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let reads: ReadSide;
  let app: FastifyInstance;
  /** acme on the free plan (reads and writes), globex on pro, a caller of no account, a write-only key. */
  let acme: Record<string, string>;
  let globex: Record<string, string>;
  let anonymous: Record<string, string>;
  let writeOnly: Record<string, string>;

  let open: GivenResource;
  let proOnly: GivenResource;
  let currentIsDraft: GivenResource;
  let acmeRunbook: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    reads = await readSide(backend.databases.reader, backend.content, { metrics: identity.metrics });
    app = await buildIdentityApp(backend, identity, undefined, { reads });
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'free');
    await givenAccount(db, 'globex', 'pro');
    acme = (
      await identity.mintKey({ accountId: 'acme', plan: 'free', scopes: ['playbook:read', 'playbook:write'] })
    ).headers;
    globex = (await identity.mintKey({ accountId: 'globex', plan: 'pro' })).headers;
    anonymous = await identity.tokenHeaders({ accounts: [] });
    writeOnly = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:write'] })).headers;

    const handbook = await givenCatalog(db, {
      slug: 'handbook',
      // Long enough that its answer is compressed (D19).
      description: `A handbook. ${'Every page of it. '.repeat(50)}`,
      facets: { capability: ['delivery'] },
    });
    open = await givenResource(backend, handbook, {
      slug: 'open',
      versions: [
        { version: '1', content: '# one\n' },
        { version: '2', content: `# two\n\n${'A line of the handbook.\n'.repeat(100)}` },
      ],
    });
    proOnly = await givenResource(backend, handbook, { slug: 'pro-only', facets: { planAccess: ['pro'] } });
    currentIsDraft = await givenResource(backend, handbook, {
      slug: 'current-is-draft',
      versions: [{ version: '0', content: 'not yet', status: 'draft' }],
    });
    await givenResource(backend, handbook, { slug: 'coming-soon', status: 'draft' });
    await givenResource(backend, handbook, { slug: 'resources', title: 'A Resource named resources' });
    await givenCatalogVersion(db, handbook, '2026.1', [open, proOnly]);

    const drafty = await givenCatalog(db, { slug: 'drafty', status: 'draft' });
    await givenResource(backend, drafty, { slug: 'inside' });
    const old = await givenCatalog(db, { slug: 'old', status: 'archived' });
    await givenResource(backend, old, { slug: 'still-readable', status: 'archived' });

    const acmeInternal = await givenCatalog(db, {
      accountId: 'acme',
      slug: 'internal',
      name: 'Acme internal',
    });
    acmeRunbook = await givenResource(backend, acmeInternal, { slug: 'runbook' });
    await givenResource(backend, acmeInternal, { slug: 'gated', facets: { planAccess: ['enterprise'] } });
    const acmeWip = await givenCatalog(db, { accountId: 'acme', slug: 'wip', status: 'draft' });
    await givenResource(backend, acmeWip, {
      slug: 'draft-doc',
      status: 'draft',
      versions: [{ version: '0.1', content: 'draft', status: 'draft' }],
    });
    const globexInternal = await givenCatalog(db, {
      accountId: 'globex',
      slug: 'internal',
      name: 'Globex internal',
    });
    await givenResource(backend, globexInternal, { slug: 'secret' });
    await givenCatalog(db, { accountId: 'globex', slug: 'globex-only' });
  });
  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  const get = (url: string, headers: Record<string, string>, extra: Record<string, string> = {}) =>
    app.inject({ url, headers: { ...headers, ...extra } });

  async function expectNotFound(url: string, headers: Record<string, string>) {
    const res = await get(url, headers);
    expect(checkProblem(res, 404, 'not_found'), `${url}: ${res.body}`).toEqual([]);
  }

  describe('answers', () => {
    it('a Catalog by its ref is the Catalog of the list, with its current version and pins', async () => {
      const res = await get(catalogUrl('svc/handbook'), acme);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
      const catalog = res.json();
      expect(checkCatalog(catalog, 'catalog')).toEqual([]);
      const listed = (await get(CATALOGS, acme))
        .json()
        .data.find((c: { slug: string }) => c.slug === 'handbook');
      expect(catalog).toEqual(listed);
      expect(catalog).toMatchObject({ humanRef: 'svc/handbook', owner: 'svc', sourceScope: 'svc' });
      expect(
        catalog.currentVersion.resourcePins.map((pin: { resourceHumanRef: string }) => pin.resourceHumanRef),
      ).toEqual(['svc/handbook/open', 'svc/handbook/pro-only']);
    });

    it('a Resource by its ref is byte for byte its detail by id, with the same ETag', async () => {
      const byRef = await get(resourceUrl('svc/handbook', 'open'), acme);
      const byId = await get(`/v3/playbook/resources/${open.id}`, acme);
      expect(byRef.statusCode, byRef.body).toBe(200);
      expect(checkResourceDetail(byRef.json(), 'resource')).toEqual([]);
      expect(byRef.body).toBe(byId.body);
      expect(byRef.headers.etag).toBe(byId.headers.etag);
      expect(byRef.json()).toMatchObject({
        id: open.id,
        humanRef: 'svc/handbook/open',
        currentVersion: { id: open.currentVersionId, version: '2', content: open.versions[1]!.content },
      });
    });

    it("an account's Catalog and Resource by ref, under org", async () => {
      const catalog = await get(catalogUrl('org/internal'), acme);
      expect(catalog.statusCode, catalog.body).toBe(200);
      expect(catalog.json()).toMatchObject({ humanRef: 'org/internal', name: 'Acme internal', owner: 'org' });
      const resource = await get(resourceUrl('org/internal', 'runbook'), acme);
      expect(resource.statusCode, resource.body).toBe(200);
      expect(resource.json()).toMatchObject({ id: acmeRunbook.id, humanRef: 'org/internal/runbook' });
      // A Catalog without a published version has none to show.
      expect(catalog.json().currentVersion).toBeUndefined();
    });

    it('the list of a Catalog’s Resources is still the list, beside the new reads', async () => {
      const list = await get(`${catalogUrl('svc/handbook')}/resources`, acme);
      expect(list.statusCode).toBe(200);
      expect(list.json().data.map((r: { slug: string }) => r.slug)).toEqual([
        'current-is-draft',
        'open',
        'pro-only',
        'resources',
      ]);
      // A Resource whose slug is the word "resources" is named by its ref too, not taken for the list.
      const named = await get(resourceUrl('svc/handbook', 'resources'), acme);
      expect(named.statusCode, named.body).toBe(200);
      expect(named.json()).toMatchObject({ title: 'A Resource named resources' });
    });
  });

  describe('D5 visibility', () => {
    it("org is always the caller's own account: each account reads its own internal, another's is 404", async () => {
      expect((await get(catalogUrl('org/internal'), globex)).json().name).toBe('Globex internal');
      expect((await get(catalogUrl('org/internal'), acme)).json().name).toBe('Acme internal');
      await expectNotFound(catalogUrl('org/globex-only'), acme);
      await expectNotFound(resourceUrl('org/internal', 'secret'), acme);
      await expectNotFound(resourceUrl('org/internal', 'runbook'), globex);
      expect((await get(resourceUrl('org/internal', 'secret'), globex)).statusCode).toBe(200);
    });

    it('a caller of no account has no org: every org ref is 404, the service’s are read', async () => {
      await expectNotFound(catalogUrl('org/internal'), anonymous);
      await expectNotFound(resourceUrl('org/internal', 'runbook'), anonymous);
      expect((await get(catalogUrl('svc/handbook'), anonymous)).statusCode).toBe(200);
      expect((await get(resourceUrl('svc/handbook', 'open'), anonymous)).statusCode).toBe(200);
    });

    it('a service draft, its Resources, a service draft Resource and a draft current version are 404', async () => {
      for (const caller of [acme, globex, anonymous]) {
        await expectNotFound(catalogUrl('svc/drafty'), caller);
        await expectNotFound(resourceUrl('svc/drafty', 'inside'), caller);
        await expectNotFound(resourceUrl('svc/handbook', 'coming-soon'), caller);
        await expectNotFound(resourceUrl('svc/handbook', 'current-is-draft'), caller);
        await expectNotFound(`/v3/playbook/resources/${currentIsDraft.id}`, caller);
      }
    });

    it("an archived service Catalog is read; an account's draft is read by that account alone", async () => {
      expect((await get(catalogUrl('svc/old'), acme)).json()).toMatchObject({ status: 'archived' });
      expect((await get(resourceUrl('svc/old', 'still-readable'), acme)).statusCode).toBe(200);
      expect((await get(catalogUrl('org/wip'), acme)).json()).toMatchObject({ status: 'draft' });
      expect((await get(resourceUrl('org/wip', 'draft-doc'), acme)).statusCode).toBe(200);
      await expectNotFound(catalogUrl('org/wip'), globex);
      await expectNotFound(resourceUrl('org/wip', 'draft-doc'), globex);
    });

    it('well-formed refs that name nothing are 404', async () => {
      await expectNotFound(catalogUrl('svc/nothing-here'), acme);
      await expectNotFound(catalogUrl(`org/${'a'.repeat(120)}`), acme);
      await expectNotFound(resourceUrl('svc/handbook', 'nothing-here'), acme);
      await expectNotFound(resourceUrl('svc/nothing-here', 'open'), acme);
    });
  });

  describe('D6 plans', () => {
    it('a plan-gated service Resource is 403 plan_required below its plan, held or not, and read on it', async () => {
      const url = resourceUrl('svc/handbook', 'pro-only');
      // Held for the pro plan first: a free caller still meets the gate.
      expect((await get(url, globex)).statusCode).toBe(200);
      for (const caller of [acme, anonymous]) {
        const res = await get(url, caller);
        expect(checkProblem(res, 403, 'plan_required'), res.body).toEqual([]);
      }
      // The Catalog that pins it is not gated (D6 gates the detail, not the lists).
      expect((await get(catalogUrl('svc/handbook'), acme)).statusCode).toBe(200);
    });

    it("an account's own Resource is never plan-gated", async () => {
      expect((await get(resourceUrl('org/internal', 'gated'), acme)).statusCode).toBe(200);
    });

    it('visibility comes before the plan: a gated Resource of a draft Catalog is 404', async () => {
      const drafty = await givenCatalog(backend.databases.primary, { slug: 'gated-drafty', status: 'draft' });
      await givenResource(backend, drafty, { slug: 'gated', facets: { planAccess: ['pro'] } });
      await expectNotFound(resourceUrl('svc/gated-drafty', 'gated'), acme);
    });
  });

  describe('D4 path parameters', () => {
    const badSlugs = ['Handbook', 'hand_book', 'hand--book', '-handbook', 'hand%20book', 'a'.repeat(121)];

    it.each(['SVC', 'acme', 'account'])('owner %s is a 400 naming owner, on both reads', async (owner) => {
      for (const url of [catalogUrl(`${owner}/handbook`), resourceUrl(`${owner}/handbook`, 'open')]) {
        const res = await get(url, acme);
        expect(checkProblem(res, 400, 'invalid_request'), `${url}: ${res.body}`).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'path', name: 'owner' }));
      }
    });

    it.each(badSlugs)('catalogSlug %s is a 400 naming catalogSlug, on both reads', async (slug) => {
      for (const url of [catalogUrl(`svc/${slug}`), resourceUrl(`org/${slug}`, 'open')]) {
        const res = await get(url, acme);
        expect(checkProblem(res, 400, 'invalid_request'), `${url}: ${res.body}`).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(
          expect.objectContaining({ in: 'path', name: 'catalogSlug' }),
        );
      }
    });

    it.each(badSlugs)('resourceSlug %s is a 400 naming resourceSlug', async (slug) => {
      const res = await get(resourceUrl('svc/handbook', slug), acme);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(
        expect.objectContaining({ in: 'path', name: 'resourceSlug' }),
      );
    });

    it('a query parameter is a 400 naming it: neither read takes one', async () => {
      for (const url of [
        catalogUrl('svc/handbook?page=1'),
        resourceUrl('svc/handbook', 'open?kind=document'),
      ]) {
        const res = await get(url, acme);
        expect(checkProblem(res, 400, 'invalid_request'), `${url}: ${res.body}`).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'query' }));
      }
    });
  });

  describe('D7 scopes and credentials, D10 rate limits', () => {
    const urls = [catalogUrl('svc/handbook'), resourceUrl('svc/handbook', 'open')];

    it('a key without playbook:read is 403 forbidden; no credential is 401', async () => {
      for (const url of urls) {
        expect(checkProblem(await get(url, writeOnly), 403, 'forbidden')).toEqual([]);
        expect(checkProblem(await get(url, {}), 401, 'unauthenticated')).toEqual([]);
      }
    });

    it('each answer carries the rate-limit budget, counted with the reads by id; past it, 429 with Retry-After', async () => {
      const limited = createTestIdentity(backend, { env: { PLAYBOOK_RATE_LIMIT_MAX: '3' } });
      const limitedApp = await buildIdentityApp(backend, limited);
      try {
        const { headers } = await limited.mintKey({ accountId: 'acme' });
        const answers = [];
        for (const url of [`/v3/playbook/resources/${open.id}`, ...urls, urls[0]!]) {
          answers.push(await limitedApp.inject({ url, headers }));
        }
        expect(answers.map((res) => res.statusCode)).toEqual([200, 200, 200, 429]);
        expect(answers.map((res) => res.headers['ratelimit-remaining'])).toEqual(['2', '1', '0', '0']);
        for (const res of answers) expect(res.headers['ratelimit-limit']).toBe('3');
        expect(Number(answers[3]!.headers['retry-after'])).toBeGreaterThan(0);
        expect(checkProblem(answers[3]!, 429, 'rate_limited')).toEqual([]);
      } finally {
        await limitedApp.close();
        await limited.close();
      }
    });
  });

  describe('D11, D19: validators, 304, compression, HEAD', () => {
    const urls = [
      catalogUrl('svc/handbook'),
      resourceUrl('svc/handbook', 'open'),
      catalogUrl('org/internal'),
    ];

    it.each(urls)(
      '%s carries a strong ETag, private no-cache and Vary, and answers a match 304 on GET and HEAD',
      async (url) => {
        const res = await get(url, acme);
        expect(res.statusCode).toBe(200);
        // The object's version tag (D29): a Catalog's starts with c, a Resource's with r.
        expect(res.headers.etag).toMatch(/^"[cr][A-Za-z0-9_-]{32}"$/);
        expect(res.headers['cache-control']).toBe('private, no-cache');
        expect(res.headers.vary).toBe('x-api-key, authorization, x-account-id, accept-encoding');
        for (const method of ['GET', 'HEAD'] as const) {
          const again = await app.inject({
            method,
            url,
            headers: { ...acme, 'if-none-match': String(res.headers.etag) },
          });
          expect(again.statusCode, method).toBe(304);
          expect(again.body).toBe('');
          expect(again.headers.etag).toBe(res.headers.etag);
        }
        const stale = await get(url, acme, { 'if-none-match': '"not-this-one"' });
        expect(stale.statusCode).toBe(200);
        expect(stale.body).toBe(res.body);
      },
    );

    it.each(urls.slice(0, 2))(
      '%s is compressed per Accept-Encoding, each encoding its own ETag and 304',
      async (url) => {
        const identityForm = await get(url, acme);
        for (const encoding of ['br', 'gzip']) {
          const res = await get(url, acme, { 'accept-encoding': `${encoding}, identity;q=0.5` });
          expect(res.statusCode).toBe(200);
          expect(res.headers['content-encoding']).toBe(encoding);
          expect(res.headers.etag).toBe(String(identityForm.headers.etag).replace(/"$/, `-${encoding}"`));
          expect(res.rawPayload.length).toBeLessThan(identityForm.rawPayload.length);
          const again = await get(url, acme, {
            'accept-encoding': encoding,
            'if-none-match': String(res.headers.etag),
          });
          expect(again.statusCode).toBe(304);
        }
      },
    );

    it.each(urls)('HEAD of %s answers the headers of GET without a body', async (url) => {
      const full = await get(url, acme);
      const head = await app.inject({ method: 'HEAD', url, headers: acme });
      expect(head.statusCode).toBe(200);
      expect(head.body).toBe('');
      expect(head.headers.etag).toBe(full.headers.etag);
      expect(head.headers['content-length']).toBe(String(full.rawPayload.length));
    });

    it('HEAD of a ref that names nothing is a 404 without a body', async () => {
      const head = await app.inject({ method: 'HEAD', url: catalogUrl('svc/nothing-here'), headers: acme });
      expect(head.statusCode).toBe(404);
      expect(head.body).toBe('');
    });
  });

  describe('answers held in memory (D26)', () => {
    /** Reads `urls` as `caller` and says how many were answered from memory. */
    const heldOf = async (caller: Record<string, string>, urls: readonly string[]) => {
      const before = reads.cache.stats.hits;
      for (const url of urls) expect((await get(url, caller)).statusCode, url).toBe(200);
      return reads.cache.stats.hits - before;
    };

    /** `playbook import` of one service Catalog, another process's write as the service knows it. */
    async function importServiceCatalog(slug: string, version: string, status = 'active'): Promise<void> {
      const tree = path.join(backend.workDir, `by-ref-${slug}-${version}`);
      await fs.mkdir(path.join(tree, slug, 'resources'), { recursive: true });
      await fs.writeFile(
        path.join(tree, slug, 'catalog.json'),
        JSON.stringify({ name: 'Guide', version, status }),
      );
      await fs.writeFile(
        path.join(tree, slug, 'resources', 'doc.json'),
        JSON.stringify({
          kind: 'document',
          title: 'Doc',
          version,
          mediaType: 'text/plain',
          content: version,
        }),
      );
      const streams = { stdout: new Discard(), stderr: new Discard() };
      expect(await main(['node', 'playbook', 'import', tree, '--owner', 'svc'], backend.env, streams)).toBe(
        0,
      );
      await followNow();
    }

    async function publishHandbook(version: string): Promise<void> {
      const res = await app.inject({
        method: 'PUT',
        url: catalogUrl('org/handbook'),
        headers: acme,
        payload: {
          name: 'Acme handbook',
          version,
          resources: [publishedResource('doc', { version, content: version })],
        },
      });
      expect([200, 201], res.body).toContain(res.statusCode);
      await followNow();
    }

    it("a repeated read is answered from memory, each caller's from its own view", async () => {
      const urls = [
        catalogUrl('svc/handbook'),
        resourceUrl('svc/handbook', 'open'),
        catalogUrl('org/internal'),
      ];
      await heldOf(acme, urls);
      expect(await heldOf(acme, urls)).toBe(urls.length);
      // Held for acme, never answered to another account, nor to a caller of no account.
      expect((await get(catalogUrl('org/internal'), globex)).json().name).toBe('Globex internal');
      await expectNotFound(catalogUrl('org/internal'), anonymous);
    });

    it("a write in an account drops that account's answers by ref and keeps every other's", async () => {
      await publishHandbook('1');
      const acmeReads = [catalogUrl('org/handbook'), resourceUrl('org/handbook', 'doc')];
      const globexReads = [catalogUrl('org/internal'), resourceUrl('org/internal', 'secret')];
      const serviceReads = [catalogUrl('svc/handbook'), resourceUrl('svc/handbook', 'open')];
      const before = await get(resourceUrl('org/handbook', 'doc'), acme);
      expect(before.json().currentVersion.version).toBe('1');
      await heldOf(acme, acmeReads);
      await heldOf(globex, [...globexReads, ...serviceReads]);
      expect(await heldOf(acme, acmeReads)).toBe(acmeReads.length);

      await publishHandbook('2');
      const after = await get(resourceUrl('org/handbook', 'doc'), acme, {
        'if-none-match': String(before.headers.etag),
      });
      expect(after.statusCode).toBe(200);
      expect(after.json().currentVersion.version).toBe('2');
      expect((await get(catalogUrl('org/handbook'), acme)).json().currentVersion.version).toBe('2');
      expect(await heldOf(globex, [...globexReads, ...serviceReads])).toBe(
        globexReads.length + serviceReads.length,
      );
    });

    it("a service change drops every caller's answers of the service's, and keeps the accounts' own", async () => {
      const serviceReads = [catalogUrl('svc/handbook'), resourceUrl('svc/handbook', 'open')];
      const accountReads = [catalogUrl('org/internal'), resourceUrl('org/internal', 'runbook')];
      await heldOf(acme, [...serviceReads, ...accountReads]);
      expect(await heldOf(acme, serviceReads)).toBe(serviceReads.length);
      await importServiceCatalog('guide', '1');
      expect(await heldOf(acme, serviceReads)).toBe(0);
      expect(await heldOf(acme, accountReads)).toBe(accountReads.length);
      // The new service Catalog is read by its ref at once.
      expect((await get(resourceUrl('svc/guide', 'doc'), acme)).json().currentVersion.content).toBe('1');
    });

    it('a service Catalog put back into draft is 404 by ref at once, to every caller, though its answers were held', async () => {
      await importServiceCatalog('soon-draft', '1');
      const urls = [catalogUrl('svc/soon-draft'), resourceUrl('svc/soon-draft', 'doc')];
      for (const caller of [acme, globex, anonymous]) {
        await heldOf(caller, urls);
        expect(await heldOf(caller, urls)).toBe(urls.length);
      }
      await importServiceCatalog('soon-draft', '2', 'draft');
      for (const caller of [acme, globex, anonymous]) {
        for (const url of urls) await expectNotFound(url, caller);
      }
    });
  });
});
