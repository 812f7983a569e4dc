import { randomUUID } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkProblem, checkResourceListItem, problemOf } from '../helpers/contract.js';
import { type GivenResource, givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

/** Path parameters (D4), visibility (D5), plans (D6) and the scope seam (D7). */

describe('path parameters, visibility, plans and scopes', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  /** acme on the free plan, globex on pro, and a caller acting for no account. */
  let acme: Record<string, string>;
  let globex: Record<string, string>;
  let anonymous: Record<string, string>;

  let open: GivenResource;
  let withDraftVersion: GivenResource;
  let currentIsDraft: GivenResource;
  let svcDraftResource: GivenResource;
  let gatedDraft: GivenResource;
  let inDraftCatalog: GivenResource;
  let inArchivedCatalog: GivenResource;
  let proOnly: GivenResource;
  let emptyPlanList: GivenResource;
  let acmeRunbook: GivenResource;
  let acmeDraft: GivenResource;
  let acmeGated: GivenResource;
  let globexSecret: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'free');
    await givenAccount(db, 'globex', 'pro');
    acme = await principals.register({ accountId: 'acme', plan: 'free', scopes: ['playbook:read'] });
    globex = await principals.register({ accountId: 'globex', plan: 'pro', scopes: ['playbook:read'] });
    anonymous = await principals.register({ accountId: null, plan: 'free', scopes: ['playbook:read'] });

    const handbook = await givenCatalog(db, { slug: 'handbook' });
    open = await givenResource(backend, handbook, { slug: 'open' });
    withDraftVersion = await givenResource(backend, handbook, {
      slug: 'with-draft-version',
      versions: [
        { version: '1', content: 'one', status: 'superseded' },
        { version: '2-draft', content: 'two, unpublished', status: 'draft' },
        { version: '3', content: 'three', status: 'published' },
      ],
    });
    currentIsDraft = await givenResource(backend, handbook, {
      slug: 'current-is-draft',
      versions: [{ version: '0-draft', content: 'not yet public', status: 'draft' }],
    });
    svcDraftResource = await givenResource(backend, handbook, { slug: 'coming-soon', status: 'draft' });
    gatedDraft = await givenResource(backend, handbook, {
      slug: 'gated-draft',
      status: 'draft',
      facets: { planAccess: ['pro'] },
    });
    proOnly = await givenResource(backend, handbook, {
      slug: 'pro-only',
      facets: { planAccess: ['pro', 'enterprise'] },
      versions: [
        { version: '1', content: 'pro one' },
        { version: '2', content: 'pro two' },
      ],
    });
    emptyPlanList = await givenResource(backend, handbook, { slug: 'everyone', facets: { planAccess: [] } });

    const drafty = await givenCatalog(db, { slug: 'drafty', status: 'draft' });
    inDraftCatalog = await givenResource(backend, drafty, { slug: 'inside' });
    const old = await givenCatalog(db, { slug: 'old', status: 'archived' });
    inArchivedCatalog = await givenResource(backend, old, { slug: 'still-readable', status: 'archived' });

    const acmeInternal = await givenCatalog(db, { accountId: 'acme', slug: 'internal' });
    acmeRunbook = await givenResource(backend, acmeInternal, { slug: 'runbook' });
    acmeGated = await givenResource(backend, acmeInternal, {
      slug: 'gated-by-facet',
      facets: { planAccess: ['enterprise'] },
    });
    const acmeWip = await givenCatalog(db, { accountId: 'acme', slug: 'wip', status: 'draft' });
    acmeDraft = await givenResource(backend, acmeWip, {
      slug: 'draft-doc',
      status: 'draft',
      versions: [{ version: '0.1', content: 'draft content', status: 'draft' }],
    });
    const globexInternal = await givenCatalog(db, { accountId: 'globex', slug: 'internal' });
    globexSecret = await givenResource(backend, globexInternal, { slug: 'secret' });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  const get = (url: string, headers: Record<string, string>) => app.inject({ url, headers });
  const detailUrl = (r: { id: string }) => `/v3/playbook/resources/${r.id}`;
  const historyUrl = (r: { id: string }) => `/v3/playbook/resources/${r.id}/versions`;
  const versionUrl = (r: { id: string }, versionId: string) =>
    `/v3/playbook/resources/${r.id}/versions/${versionId}`;
  /** The three per-Resource operations, each a URL for one Resource. */
  const resourceOperations = (r: GivenResource) => [
    detailUrl(r),
    historyUrl(r),
    versionUrl(r, r.currentVersionId),
  ];

  async function expectNotFound(url: string, headers: Record<string, string>) {
    const res = await get(url, headers);
    expect(checkProblem(res, 404, 'not_found'), `${url}: ${res.body}`).toEqual([]);
    return res;
  }

  describe('D4 path parameters', () => {
    it.each(['SVC', 'acme', 'org2', 'account', 'all'])(
      'D4: owner %s is a 400 naming owner',
      async (owner) => {
        const res = await get(`/v3/playbook/catalogs/${owner}/handbook/resources`, acme);
        expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'path', name: 'owner' }));
      },
    );

    it.each([
      ['uppercase', 'Handbook'],
      ['an underscore', 'hand_book'],
      ['a double hyphen', 'hand--book'],
      ['a leading hyphen', '-handbook'],
      ['a trailing hyphen', 'handbook-'],
      ['an encoded space', 'hand%20book'],
      ['a dot', 'hand.book'],
      ['121 characters', 'a'.repeat(121)],
      ['500 characters', 'a'.repeat(500)],
    ])('D4: a catalogSlug with %s is a 400 naming catalogSlug', async (_why, slug) => {
      for (const owner of ['svc', 'org']) {
        const res = await get(`/v3/playbook/catalogs/${owner}/${slug}/resources`, acme);
        expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(
          expect.objectContaining({ in: 'path', name: 'catalogSlug' }),
        );
      }
    });

    it.each([
      ['a short slug', 'nothing-here'],
      ['120 characters', 'a'.repeat(120)],
    ])('D4: a well-formed catalogSlug with %s that names nothing is a 404', async (_why, slug) => {
      await expectNotFound(`/v3/playbook/catalogs/svc/${slug}/resources`, acme);
      await expectNotFound(`/v3/playbook/catalogs/org/${slug}/resources`, acme);
    });

    const badUuids: [string, string][] = [
      ['a word', 'abc'],
      ['version digit 0', '0190a1b2-c3d4-0e5f-8a9b-0c1d2e3f4a5b'],
      ['variant c', '0190a1b2-c3d4-7e5f-ca9b-0c1d2e3f4a5b'],
      ['no hyphens', '0190a1b2c3d47e5f8a9b0c1d2e3f4a5b'],
      ['an extra character', '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5bb'],
      ['a non-hex digit', '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g'],
      ['200 characters', 'f'.repeat(200)],
    ];

    it.each(badUuids)('D4: a resourceId with %s is a 400 naming resourceId', async (_why, id) => {
      for (const url of [detailUrl({ id }), historyUrl({ id }), versionUrl({ id }, open.currentVersionId)]) {
        const res = await get(url, acme);
        expect(checkProblem(res, 400, 'invalid_request'), `${url}: ${res.body}`).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(
          expect.objectContaining({ in: 'path', name: 'resourceId' }),
        );
      }
    });

    it.each(badUuids)('D4: a versionId with %s is a 400 naming versionId', async (_why, id) => {
      const res = await get(versionUrl(open, id), acme);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(
        expect.objectContaining({ in: 'path', name: 'versionId' }),
      );
    });

    it.each([
      ['a random v4', randomUUID()],
      ['the nil uuid', '00000000-0000-0000-0000-000000000000'],
      ['the max uuid', 'ffffffff-ffff-ffff-ffff-ffffffffffff'],
    ])('D4: %s resourceId that names nothing is a 404', async (_why, id) => {
      for (const url of [detailUrl({ id }), historyUrl({ id }), versionUrl({ id }, open.currentVersionId)]) {
        await expectNotFound(url, acme);
      }
    });

    it('D4: a well-formed versionId that names nothing is a 404', async () => {
      await expectNotFound(versionUrl(open, randomUUID()), acme);
      await expectNotFound(versionUrl(open, 'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'), acme);
    });

    it('D4: uppercase uuids resolve to the same Resource and version', async () => {
      const upper = { id: open.id.toUpperCase() };
      const detail = await get(detailUrl(upper), acme);
      expect(detail.statusCode).toBe(200);
      expect(detail.json().id).toBe(open.id);
      expect((await get(historyUrl(upper), acme)).json().data[0].id).toBe(open.currentVersionId);
      const version = await get(versionUrl(upper, open.currentVersionId.toUpperCase()), acme);
      expect(version.statusCode).toBe(200);
      expect(version.json().id).toBe(open.currentVersionId);
    });
  });

  describe('D5 visibility', () => {
    it('D5: org/<slug> is always the caller account: the same slug names a different Catalog per caller', async () => {
      const forAcme = await get('/v3/playbook/catalogs/org/internal/resources', acme);
      const forGlobex = await get('/v3/playbook/catalogs/org/internal/resources', globex);
      expect(forAcme.json().data.map((r: { id: string }) => r.id)).toEqual([acmeGated.id, acmeRunbook.id]);
      expect(forGlobex.json().data.map((r: { id: string }) => r.id)).toEqual([globexSecret.id]);
    });

    it('D5: svc/<slug> never reaches an account Catalog of that slug', async () => {
      await expectNotFound('/v3/playbook/catalogs/svc/internal/resources', acme);
      await expectNotFound('/v3/playbook/catalogs/org/handbook/resources', acme);
    });

    it("D5: another account's Resource is a 404 on every operation", async () => {
      for (const url of resourceOperations(globexSecret)) await expectNotFound(url, acme);
      for (const url of resourceOperations(acmeRunbook)) await expectNotFound(url, globex);
    });

    it("D5: another account's Catalogs never appear in the list", async () => {
      const res = await get('/v3/playbook/catalogs?pageSize=100', globex);
      const refs = res.json().data.map((c: { id: string; humanRef: string }) => c.humanRef);
      expect(refs).toEqual(['svc/handbook', 'svc/old', 'org/internal']);
    });

    it('D5: a service draft Catalog is invisible to every caller, and so are its Resources', async () => {
      for (const headers of [acme, globex, anonymous]) {
        const list = await get('/v3/playbook/catalogs?pageSize=100', headers);
        expect(list.json().data.map((c: { slug: string }) => c.slug)).not.toContain('drafty');
        await expectNotFound('/v3/playbook/catalogs/svc/drafty/resources', headers);
        for (const url of resourceOperations(inDraftCatalog)) await expectNotFound(url, headers);
      }
    });

    it('D5: a service draft Resource is absent from its list and a 404 for every caller', async () => {
      for (const headers of [acme, globex, anonymous]) {
        const list = await get('/v3/playbook/catalogs/svc/handbook/resources?pageSize=100', headers);
        expect(list.json().data.map((r: { id: string }) => r.id)).not.toContain(svcDraftResource.id);
        for (const url of resourceOperations(svcDraftResource)) await expectNotFound(url, headers);
      }
    });

    it('D5: a service draft version is a 404 for every caller and absent from the history', async () => {
      const draftVersionId = withDraftVersion.versionIds[1]!;
      for (const headers of [acme, globex, anonymous]) {
        await expectNotFound(versionUrl(withDraftVersion, draftVersionId), headers);
        const history = await get(historyUrl(withDraftVersion), headers);
        expect(history.json().data.map((v: { id: string }) => v.id)).toEqual([
          withDraftVersion.versionIds[2],
          withDraftVersion.versionIds[0],
        ]);
        expect(history.json().meta.total).toBe(2);
      }
    });

    it('D5: a service Resource whose current version is a draft never shows that version', async () => {
      const list = await get('/v3/playbook/catalogs/svc/handbook/resources?pageSize=100', acme);
      const item = list.json().data.find((r: { id: string }) => r.id === currentIsDraft.id);
      expect(item).toBeDefined();
      expect(checkResourceListItem(item, 'item')).toEqual([]);
      expect(item).not.toHaveProperty('currentVersion');
      expect(list.body).not.toContain(currentIsDraft.currentVersionId);
      await expectNotFound(detailUrl(currentIsDraft), acme);
      await expectNotFound(versionUrl(currentIsDraft, currentIsDraft.currentVersionId), acme);
      expect((await get(historyUrl(currentIsDraft), acme)).json().data).toEqual([]);
    });

    it('D5: an archived service Catalog and its archived Resources stay readable', async () => {
      const list = await get('/v3/playbook/catalogs/svc/old/resources', anonymous);
      expect(list.json().data.map((r: { id: string }) => r.id)).toEqual([inArchivedCatalog.id]);
      for (const url of resourceOperations(inArchivedCatalog))
        expect((await get(url, anonymous)).statusCode).toBe(200);
    });

    it('D5: account drafts (Catalog, Resource, version) are visible to their own account', async () => {
      const catalogs = await get('/v3/playbook/catalogs?sourceScope=account', acme);
      expect(catalogs.json().data.map((c: { slug: string; status: string }) => [c.slug, c.status])).toEqual([
        ['internal', 'active'],
        ['wip', 'draft'],
      ]);
      const list = await get('/v3/playbook/catalogs/org/wip/resources', acme);
      expect(list.json().data.map((r: { id: string }) => r.id)).toEqual([acmeDraft.id]);
      const detail = await get(detailUrl(acmeDraft), acme);
      expect(detail.statusCode).toBe(200);
      expect(detail.json().currentVersion).toMatchObject({ status: 'draft', content: 'draft content' });
      expect((await get(versionUrl(acmeDraft, acmeDraft.currentVersionId), acme)).statusCode).toBe(200);
      expect((await get(historyUrl(acmeDraft), acme)).json().meta.total).toBe(1);
      for (const url of resourceOperations(acmeDraft)) await expectNotFound(url, globex);
    });

    it('D5: a version of another Resource is a 404', async () => {
      await expectNotFound(versionUrl(open, withDraftVersion.currentVersionId), acme);
      await expectNotFound(versionUrl(acmeRunbook, open.currentVersionId), acme);
    });

    it('D5: a caller without an account sees service Catalogs only, and org/... is a 404', async () => {
      const res = await get('/v3/playbook/catalogs', anonymous);
      expect(res.json().data.map((c: { humanRef: string }) => c.humanRef)).toEqual([
        'svc/handbook',
        'svc/old',
      ]);
      expect((await get('/v3/playbook/catalogs?sourceScope=account', anonymous)).json().meta.total).toBe(0);
      await expectNotFound('/v3/playbook/catalogs/org/internal/resources', anonymous);
      for (const url of resourceOperations(acmeRunbook)) await expectNotFound(url, anonymous);
      expect((await get(detailUrl(open), anonymous)).statusCode).toBe(200);
    });

    it('D5: a hidden id answers exactly as a missing one (status, code, headers, wording)', async () => {
      const shape = (res: LightMyRequestResponse, id: string) => {
        const problem = problemOf(res);
        return {
          status: res.statusCode,
          headerNames: Object.keys(res.headers)
            .filter((h) => h !== 'content-length' && h !== 'date')
            .sort(),
          contentType: res.headers['content-type'],
          cacheControl: res.headers['cache-control'],
          problem: { ...problem, requestId: '-', detail: problem.detail.replaceAll(id, '<id>') },
        };
      };
      const missing = randomUUID();
      for (const [hidden, make] of [
        [globexSecret.id, (id: string) => detailUrl({ id })],
        [globexSecret.id, (id: string) => historyUrl({ id })],
        [globexSecret.id, (id: string) => versionUrl({ id }, globexSecret.currentVersionId)],
        [withDraftVersion.versionIds[1]!, (id: string) => versionUrl(withDraftVersion, id)],
      ] as const) {
        const hiddenAnswer = await get(make(hidden), acme);
        const missingAnswer = await get(make(missing), acme);
        expect(shape(hiddenAnswer, hidden)).toEqual(shape(missingAnswer, missing));
      }
      const hiddenCatalog = await get('/v3/playbook/catalogs/svc/drafty/resources', acme);
      const missingCatalog = await get('/v3/playbook/catalogs/svc/never-was/resources', acme);
      expect(shape(hiddenCatalog, 'drafty')).toEqual(shape(missingCatalog, 'never-was'));
    });
  });

  describe('D6 plans', () => {
    it('D6: a plan-gated service Resource still appears in its list', async () => {
      const list = await get('/v3/playbook/catalogs/svc/handbook/resources', acme);
      const item = list.json().data.find((r: { id: string }) => r.id === proOnly.id);
      expect(item).toMatchObject({ facets: { planAccess: ['pro', 'enterprise'] } });
    });

    it('D6: its detail, history and versions answer 403 plan_required to a plan not listed', async () => {
      for (const url of [...resourceOperations(proOnly), versionUrl(proOnly, proOnly.versionIds[0]!)]) {
        for (const headers of [acme, anonymous]) {
          const res = await get(url, headers);
          expect(checkProblem(res, 403, 'plan_required'), `${url}: ${res.body}`).toEqual([]);
          expect(res.body).not.toContain('pro one');
          expect(res.body).not.toContain('pro two');
        }
      }
    });

    it('D6: a listed plan reads them all', async () => {
      for (const url of [...resourceOperations(proOnly), versionUrl(proOnly, proOnly.versionIds[0]!)]) {
        expect((await get(url, globex)).statusCode).toBe(200);
      }
      expect((await get(detailUrl(proOnly), globex)).json().currentVersion.content).toBe('pro two');
    });

    it('D6: an invisible plan-gated Resource is a 404, not a 403 that would reveal it', async () => {
      for (const headers of [acme, globex]) {
        for (const url of resourceOperations(gatedDraft)) await expectNotFound(url, headers);
      }
    });

    it('D6: a plan-gated Resource is still 404 for a version of another Resource, not 200', async () => {
      await expectNotFound(versionUrl(proOnly, open.currentVersionId), globex);
    });

    it('D6: an empty planAccess gates nobody', async () => {
      for (const url of resourceOperations(emptyPlanList))
        expect((await get(url, anonymous)).statusCode).toBe(200);
    });

    it('D6: account-owned Resources are never plan-gated', async () => {
      for (const url of resourceOperations(acmeGated)) expect((await get(url, acme)).statusCode).toBe(200);
    });
  });

  describe('D7 scopes and credentials', () => {
    const everyOperation = () => [
      '/v3/playbook/catalogs',
      '/v3/playbook/catalogs/svc/handbook/resources',
      ...resourceOperations(open),
    ];

    it('D7: a principal without playbook:read is a 403 forbidden on every read', async () => {
      const writeOnly = await principals.register({ accountId: 'acme', scopes: ['playbook:write'] });
      for (const url of everyOperation()) {
        for (const headers of [writeOnly]) {
          const res = await get(url, headers);
          expect(checkProblem(res, 403, 'forbidden'), `${url}: ${res.body}`).toEqual([]);
        }
      }
    });

    it('D7: no credential, or an unknown one, is a 401 unauthenticated on every read', async () => {
      for (const url of everyOperation()) {
        const credentials: Record<string, string>[] = [{}, { 'x-api-key': 'svc_sk_test_unknown' }];
        for (const headers of credentials) {
          const res = await get(url, headers);
          expect(checkProblem(res, 401, 'unauthenticated'), `${url}: ${res.body}`).toEqual([]);
          expect(res.body).not.toContain('svc_sk_test_unknown');
        }
      }
    });
  });
});
