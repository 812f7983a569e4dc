import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import {
  checkCatalog,
  checkPage,
  checkProblem,
  checkResourceListItem,
  problemOf,
} from '../helpers/contract.js';
import { type GivenResource, givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

/** D3: defaults, bounds, order, filters and query-string rules of the list operations. */

const KINDS = ['document', 'topic', 'reference', 'workflow', 'policy'] as const;
const SVC_SLUGS = ['alpha', 'beta', 'delta', 'gamma', 'omega', 'zeta'];
const ACCOUNT_SLUGS = ['aaa-first-by-slug', 'mid', 'zzz'];

describe('lists (D3)', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let headers: Record<string, string>;
  let withVersions: GivenResource;
  /** Slugs of the 23 Resources of svc/alpha, in slug order. */
  const resourceSlugs = Array.from({ length: 23 }, (_, i) => `item-${String(i).padStart(2, '0')}`);

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    const db = backend.databases.primary;
    await givenAccount(db, 'acme');
    await givenAccount(db, 'other');
    headers = await principals.register({ accountId: 'acme', plan: 'free', scopes: ['playbook:read'] });

    // Inserted out of order, so that the answer's order is the service's doing.
    for (const slug of [...SVC_SLUGS].reverse()) {
      await givenCatalog(db, {
        slug,
        facets:
          slug === 'beta'
            ? { capability: ['delivery', 'search'], technology: ['typescript'] }
            : slug === 'gamma'
              ? { capability: ['search'] }
              : undefined,
      });
    }
    await givenCatalog(db, { slug: 'hidden-draft', status: 'draft' });
    for (const slug of [...ACCOUNT_SLUGS].reverse()) {
      await givenCatalog(db, {
        accountId: 'acme',
        slug,
        facets: slug === 'mid' ? { capability: ['search'] } : undefined,
      });
    }
    await givenCatalog(db, { accountId: 'other', slug: 'theirs', facets: { capability: ['search'] } });

    const alpha = await givenCatalog(db, { slug: 'alpha-resources' });
    for (const [index, slug] of [...resourceSlugs].reverse().entries()) {
      await givenResource(backend, alpha, { slug, kind: KINDS[index % KINDS.length] });
    }
    withVersions = await givenResource(backend, await givenCatalog(db, { slug: 'versioned' }), {
      slug: 'doc',
      versions: Array.from({ length: 5 }, (_, i) => ({ version: `v${i}`, content: `content ${i}` })),
    });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  const get = (url: string) => app.inject({ url, headers });
  const CATALOGS = '/v3/playbook/catalogs';
  const RESOURCES = '/v3/playbook/catalogs/svc/alpha-resources/resources';
  const versionsUrl = () => `/v3/playbook/resources/${withVersions.id}/versions`;

  describe('D3 defaults and envelope', () => {
    it('D3: without page/pageSize the first 20 items come back, with pageCount = ceil(total / 20)', async () => {
      const res = await get(RESOURCES);
      expect(res.statusCode).toBe(200);
      expect(checkPage(res.json(), checkResourceListItem)).toEqual([]);
      expect(res.json().meta).toEqual({ page: 1, pageSize: 20, pageCount: 2, total: 23 });
      expect(res.json().data.map((r: { slug: string }) => r.slug)).toEqual(resourceSlugs.slice(0, 20));
    });

    it('D3: page 2 of the default size holds the rest', async () => {
      const res = await get(`${RESOURCES}?page=2`);
      expect(res.json().meta).toEqual({ page: 2, pageSize: 20, pageCount: 2, total: 23 });
      expect(res.json().data.map((r: { slug: string }) => r.slug)).toEqual(resourceSlugs.slice(20));
    });

    it.each([
      [1, 23],
      [5, 5],
      [7, 4],
      [23, 1],
      [100, 1],
    ])('D3: pageSize=%i gives pageCount %i for 23 items', async (pageSize, pageCount) => {
      const res = await get(`${RESOURCES}?pageSize=${pageSize}`);
      expect(res.statusCode).toBe(200);
      expect(res.json().meta).toEqual({ page: 1, pageSize, pageCount, total: 23 });
      expect(res.json().data).toHaveLength(Math.min(pageSize, 23));
    });

    it.each([4, 99, 9007199254740991])(
      'D3: page %i past the last is a 200 with data [] and the true total',
      async (page) => {
        const res = await get(`${RESOURCES}?page=${page}&pageSize=10`);
        expect(res.statusCode).toBe(200);
        expect(res.json()).toEqual({ data: [], meta: { page, pageSize: 10, pageCount: 3, total: 23 } });
      },
    );

    it('D3: an empty list has total 0 and pageCount 0', async () => {
      const res = await get(`${CATALOGS}?capability=nothing-has-this`);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ data: [], meta: { page: 1, pageSize: 20, pageCount: 0, total: 0 } });
    });

    it('D3: leading zeros are still decimal integers', async () => {
      const res = await get(`${RESOURCES}?page=002&pageSize=010`);
      expect(res.statusCode).toBe(200);
      expect(res.json().meta).toMatchObject({ page: 2, pageSize: 10 });
    });
  });

  describe('D3 order', () => {
    it('D3: Catalogs are service-owned first, then the account, each by slug; drafts and other accounts are absent', async () => {
      const res = await get(CATALOGS);
      expect(res.statusCode).toBe(200);
      expect(checkPage(res.json(), checkCatalog)).toEqual([]);
      expect(res.json().data.map((c: { humanRef: string }) => c.humanRef)).toEqual([
        'svc/alpha',
        'svc/alpha-resources',
        'svc/beta',
        'svc/delta',
        'svc/gamma',
        'svc/omega',
        'svc/versioned',
        'svc/zeta',
        'org/aaa-first-by-slug',
        'org/mid',
        'org/zzz',
      ]);
    });

    it('D3: walking the Resources one page at a time yields each once, by slug', async () => {
      const seen: string[] = [];
      for (let page = 1; page <= 5; page++) {
        const res = await get(`${RESOURCES}?pageSize=5&page=${page}`);
        expect(res.json().meta).toEqual({ page, pageSize: 5, pageCount: 5, total: 23 });
        seen.push(...res.json().data.map((r: { slug: string }) => r.slug));
      }
      expect(seen).toEqual(resourceSlugs);
    });
  });

  describe('D3 bounds of page and pageSize', () => {
    const badValues: [string, string][] = [
      ['zero', '0'],
      ['negative', '-1'],
      ['a fraction', '1.5'],
      ['an exponent', '1e2'],
      ['hexadecimal', '0x10'],
      ['a leading space', '%205'],
      ['a trailing space', '5%20'],
      ['a plus sign', '%2B5'],
      ['empty', ''],
      ['a word', 'abc'],
      ['Infinity', 'Infinity'],
    ];
    const lists = () => [
      ['list Catalogs', CATALOGS],
      ['list Resources', RESOURCES],
      ['list versions (D16)', versionsUrl()],
    ];

    for (const parameter of ['page', 'pageSize']) {
      it.each(badValues)(`D3: ${parameter} that is %s is a 400 naming it`, async (_why, value) => {
        for (const [name, url] of lists()) {
          const res = await get(`${url}?${parameter}=${value}`);
          expect(checkProblem(res, 400, 'invalid_request'), `${name}: ${res.body}`).toEqual([]);
          expect(problemOf(res).errors).toContainEqual(
            expect.objectContaining({ in: 'query', name: parameter }),
          );
        }
      });
    }

    it.each([
      ['pageSize', '101'],
      ['pageSize', '1000'],
      ['page', '9007199254740992'],
      ['page', '99999999999999999999999999'],
      ['page', '9'.repeat(400)],
    ])('D3: %s=%s is out of range: 400 naming it', async (parameter, value) => {
      for (const [name, url] of lists()) {
        const res = await get(`${url}?${parameter}=${value}`);
        expect(checkProblem(res, 400, 'invalid_request'), `${name}: ${res.body}`).toEqual([]);
        expect(problemOf(res).errors).toContainEqual(
          expect.objectContaining({ in: 'query', name: parameter }),
        );
      }
    });

    it('D3: pageSize=100 and the largest page are within range', async () => {
      expect((await get(`${CATALOGS}?pageSize=100`)).statusCode).toBe(200);
      expect((await get(`${CATALOGS}?page=9007199254740991&pageSize=100`)).statusCode).toBe(200);
    });
  });

  describe('D3 array filters', () => {
    const slugsOf = async (url: string) => {
      const res = await get(url);
      expect(res.statusCode, res.body).toBe(200);
      return res.json().data.map((item: { slug: string }) => item.slug) as string[];
    };
    const expectedKinds = (kinds: readonly string[]) =>
      [...resourceSlugs]
        .reverse()
        .filter((_s, index) => kinds.includes(KINDS[index % KINDS.length]!))
        .sort();

    it('D3: kind=a&kind=b and kind=a,b filter alike, to Resources of those kinds', async () => {
      const repeated = await slugsOf(`${RESOURCES}?kind=topic&kind=policy&pageSize=100`);
      const commas = await slugsOf(`${RESOURCES}?kind=topic,policy&pageSize=100`);
      expect(repeated).toEqual(expectedKinds(['topic', 'policy']));
      expect(commas).toEqual(repeated);
      expect(await slugsOf(`${RESOURCES}?kind=topic,policy&kind=workflow&pageSize=100`)).toEqual(
        expectedKinds(['topic', 'policy', 'workflow']),
      );
    });

    it('D3: a kind filter counts only matching Resources in meta', async () => {
      const res = await get(`${RESOURCES}?kind=document&pageSize=2`);
      const total = expectedKinds(['document']).length;
      expect(res.json().meta).toEqual({ page: 1, pageSize: 2, pageCount: Math.ceil(total / 2), total });
    });

    it('D3: a known kind with no Resources gives an empty page', async () => {
      expect(await slugsOf(`${RESOURCES}?kind=team-member`)).toEqual([]);
    });

    it.each([
      ['an unknown kind', 'kind=recipe'],
      ['an unknown kind among known ones', 'kind=topic,recipe'],
      ['an unknown kind repeated', 'kind=topic&kind=recipe'],
      ['an empty element', 'kind=topic,'],
      ['an empty value', 'kind='],
      ['a different case', 'kind=Topic'],
    ])('D3: %s is a 400 naming kind', async (_why, query) => {
      const res = await get(`${RESOURCES}?${query}`);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'query', name: 'kind' }));
    });

    it('D3: sourceScope filters Catalogs in both forms', async () => {
      const svc = await slugsOf(`${CATALOGS}?sourceScope=svc`);
      const account = await slugsOf(`${CATALOGS}?sourceScope=account`);
      expect(svc).toEqual([
        'alpha',
        'alpha-resources',
        'beta',
        'delta',
        'gamma',
        'omega',
        'versioned',
        'zeta',
      ]);
      expect(account).toEqual(ACCOUNT_SLUGS);
      expect(await slugsOf(`${CATALOGS}?sourceScope=svc,account`)).toEqual([...svc, ...account]);
      expect(await slugsOf(`${CATALOGS}?sourceScope=account&sourceScope=svc`)).toEqual([...svc, ...account]);
    });

    it.each([
      ['sourceScope=org'],
      ['sourceScope=svc,everyone'],
      ['sourceScope=svc&sourceScope=x'],
      ['sourceScope='],
    ])('D3: %s is a 400 naming sourceScope', async (query) => {
      const res = await get(`${CATALOGS}?${query}`);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(
        expect.objectContaining({ in: 'query', name: 'sourceScope' }),
      );
    });
  });

  describe('D3 capability', () => {
    const slugsOf = async (query: string) => {
      const res = await get(`${CATALOGS}?${query}`);
      expect(res.statusCode, res.body).toBe(200);
      return res.json().data.map((c: { humanRef: string }) => c.humanRef) as string[];
    };

    it('D3: capability matches Catalogs whose facets.capability holds it, visible ones only', async () => {
      expect(await slugsOf('capability=search')).toEqual(['svc/beta', 'svc/gamma', 'org/mid']);
      expect(await slugsOf('capability=delivery')).toEqual(['svc/beta']);
    });

    it('D3: capability is an exact element match, not a prefix, substring or another facet', async () => {
      expect(await slugsOf('capability=deliver')).toEqual([]);
      expect(await slugsOf('capability=search,delivery')).toEqual([]);
      expect(await slugsOf('capability=typescript')).toEqual([]);
    });

    it('D3: capability combines with sourceScope', async () => {
      expect(await slugsOf('capability=search&sourceScope=account')).toEqual(['org/mid']);
    });

    it('D3: capability of 80 characters is allowed', async () => {
      expect(await slugsOf(`capability=${'c'.repeat(80)}`)).toEqual([]);
    });

    it.each([
      ['empty', 'capability='],
      ['81 characters', `capability=${'c'.repeat(81)}`],
    ])('D3: capability %s is a 400 naming it', async (_why, query) => {
      const res = await get(`${CATALOGS}?${query}`);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(
        expect.objectContaining({ in: 'query', name: 'capability' }),
      );
    });
  });

  describe('D3 unknown and repeated parameters', () => {
    it.each([
      ['list Catalogs', CATALOGS, 'kind=topic'],
      ['list Catalogs', CATALOGS, 'limit=5'],
      ['list Resources', RESOURCES, 'sourceScope=svc'],
      ['list Resources', RESOURCES, 'capability=search'],
      ['list Resources', RESOURCES, 'Page=1'],
    ])('D3: %s refuses the unknown parameter of %s?%s, naming it', async (_name, url, query) => {
      const res = await get(`${url}?${query}`);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      const name = query.split('=')[0];
      expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'query', name }));
    });

    it('D3: the versions list (D16) refuses unknown parameters too', async () => {
      const res = await get(`${versionsUrl()}?status=published`);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'query', name: 'status' }));
    });

    it.each([
      ['page', `${CATALOGS}?page=1&page=2`],
      ['page', `${CATALOGS}?page=1&page=1`],
      ['pageSize', `${RESOURCES}?pageSize=5&pageSize=6`],
      ['capability', `${CATALOGS}?capability=search&capability=delivery`],
    ])('D3: the scalar %s given twice is a 400 naming it', async (name, url) => {
      const res = await get(url);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors).toContainEqual(expect.objectContaining({ in: 'query', name }));
    });

    it('D3: every problem of one request is listed', async () => {
      const res = await get(`${CATALOGS}?pageSize=0&color=red&capability=`);
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      const names = problemOf(res).errors?.map((e) => e.name);
      expect(names).toEqual(expect.arrayContaining(['pageSize', 'color', 'capability']));
    });

    it.each([
      ['Resource detail', () => `/v3/playbook/resources/${withVersions.id}?include=content`],
      [
        'version detail',
        () => `/v3/playbook/resources/${withVersions.id}/versions/${withVersions.currentVersionId}?x=1`,
      ],
    ])('D3: the %s refuses unknown query parameters as well', async (_name, url) => {
      const res = await get(url());
      expect(checkProblem(res, 400, 'invalid_request'), res.body).toEqual([]);
      expect(problemOf(res).errors?.[0]).toMatchObject({ in: 'query' });
    });
  });
});
