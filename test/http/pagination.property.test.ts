import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LifecycleStatus } from '../../src/schemas/common.js';
import type { ResourceKind, VersionStatus } from '../../src/schemas/playbook.js';
import { buildTestApp, PrincipalRegistry } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { checkCatalog, checkPage, checkResourceListItem, checkVersionSummary } from '../helpers/contract.js';
import { clearStorage, givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

/**
 * D3 as a property: whatever mix of visible and invisible items storage holds and whatever page size
 * the caller picks, walking every page yields each visible item exactly once, in the documented
 * order, with `meta` consistent on every page and an empty page just past the last.
 */

type Owner = 'svc' | 'mine' | 'theirs';
const STATUSES: LifecycleStatus[] = ['draft', 'active', 'archived'];
const KINDS: ResourceKind[] = ['document', 'topic', 'policy'];
const VERSION_STATUSES: VersionStatus[] = ['draft', 'published', 'superseded', 'archived'];

const slug = fc.stringMatching(/^[a-z0-9]{1,4}(-[a-z0-9]{1,2})?$/);

const catalogs = fc.uniqueArray(
  fc.record({
    owner: fc.constantFrom<Owner>('svc', 'mine', 'theirs'),
    slug,
    status: fc.constantFrom(...STATUSES),
  }),
  { maxLength: 12, selector: (c) => `${c.owner}:${c.slug}` },
);
const resources = fc.uniqueArray(
  fc.record({ slug, status: fc.constantFrom(...STATUSES), kind: fc.constantFrom(...KINDS) }),
  { maxLength: 12, selector: (r) => r.slug },
);
const versions = fc.array(fc.constantFrom(...VERSION_STATUSES), { minLength: 1, maxLength: 8 });

interface Walked<T> {
  items: T[];
  /** Problems found along the way; empty when every page was consistent. */
  problems: string[];
}

describe('pagination property (D3)', () => {
  let backend: TestBackend;
  let app: FastifyInstance;
  const principals = new PrincipalRegistry();
  let mine: Record<string, string>;
  let noAccount: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    app = await buildTestApp(backend, principals);
    mine = await principals.register({ accountId: 'mine', scopes: ['playbook:read'] });
    noAccount = await principals.register({ accountId: null, scopes: ['playbook:read'] });
  });
  afterAll(async () => {
    await app.close();
    await backend.cleanup();
  });

  /** Reads pages 1, 2, … until one past `pageCount`, checking each envelope against the first. */
  async function walk<T>(
    url: string,
    headers: Record<string, string>,
    pageSize: number,
    check: Parameters<typeof checkPage>[1],
  ): Promise<Walked<T>> {
    const items: T[] = [];
    const problems: string[] = [];
    const separator = url.includes('?') ? '&' : '?';
    let first: { total: number; pageCount: number } | undefined;
    for (let page = 1; ; page++) {
      const res = await app.inject({ url: `${url}${separator}page=${page}&pageSize=${pageSize}`, headers });
      if (res.statusCode !== 200) return { items, problems: [`page ${page}: status ${res.statusCode}`] };
      const body = res.json() as {
        data: T[];
        meta: { page: number; pageSize: number; total: number; pageCount: number };
      };
      problems.push(...checkPage(body, check).map((p) => `page ${page}: ${p}`));
      first ??= body.meta;
      if (body.meta.page !== page || body.meta.pageSize !== pageSize)
        problems.push(`page ${page}: meta echoes wrongly`);
      if (body.meta.total !== first.total || body.meta.pageCount !== first.pageCount) {
        problems.push(`page ${page}: total or pageCount changed between pages`);
      }
      if (page > body.meta.pageCount) {
        if (body.data.length > 0) problems.push(`page ${page}: past the last page but not empty`);
        break;
      }
      if (page < body.meta.pageCount && body.data.length !== pageSize)
        problems.push(`page ${page}: not full`);
      items.push(...body.data);
    }
    if (items.length !== first?.total)
      problems.push(`walked ${items.length} items, total says ${first?.total}`);
    return { items, problems };
  }

  const byCodeUnits = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

  it('D3: walking every page of the Catalogs yields each visible Catalog once, svc first then the account, each by slug', async () => {
    await fc.assert(
      fc.asyncProperty(
        catalogs,
        fc.integer({ min: 1, max: 6 }),
        fc.boolean(),
        async (given, pageSize, withAccount) => {
          const db = backend.databases.primary;
          await clearStorage(db);
          await givenAccount(db, 'mine');
          await givenAccount(db, 'theirs');
          for (const c of given) {
            await givenCatalog(db, {
              slug: c.slug,
              status: c.status,
              accountId: c.owner === 'svc' ? null : c.owner,
            });
          }
          const visible = (owner: Owner) =>
            given
              .filter((c) => c.owner === owner && (owner === 'mine' || c.status !== 'draft'))
              .map((c) => c.slug)
              .sort(byCodeUnits);
          const expected = [
            ...visible('svc').map((s) => `svc/${s}`),
            ...(withAccount ? visible('mine').map((s) => `org/${s}`) : []),
          ];

          const walked = await walk<{ humanRef: string }>(
            '/v3/playbook/catalogs',
            withAccount ? mine : noAccount,
            pageSize,
            checkCatalog,
          );
          expect(walked.problems).toEqual([]);
          expect(walked.items.map((c) => c.humanRef)).toEqual(expected);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('D3: walking every page of a Catalog yields each visible Resource once, by slug, also under a kind filter', async () => {
    await fc.assert(
      fc.asyncProperty(
        resources,
        fc.constantFrom<'svc' | 'org'>('svc', 'org'),
        fc.integer({ min: 1, max: 6 }),
        fc.subarray(KINDS),
        async (given, owner, pageSize, kinds) => {
          const db = backend.databases.primary;
          await clearStorage(db);
          await givenAccount(db, 'mine');
          const catalog = await givenCatalog(db, {
            slug: 'target',
            accountId: owner === 'svc' ? null : 'mine',
          });
          // A same-named Catalog of another owner must not leak its Resources into the walk.
          const decoy = await givenCatalog(db, {
            slug: 'target',
            accountId: owner === 'svc' ? 'mine' : null,
          });
          await givenResource(backend, decoy, { slug: 'decoy' });
          for (const r of given) await givenResource(backend, catalog, r);

          const expected = given
            .filter((r) => owner === 'org' || r.status !== 'draft')
            .filter((r) => kinds.length === 0 || kinds.includes(r.kind))
            .map((r) => r.slug)
            .sort(byCodeUnits);
          const filter = kinds.length > 0 ? `?kind=${kinds.join(',')}` : '';
          const walked = await walk<{ slug: string }>(
            `/v3/playbook/catalogs/${owner}/target/resources${filter}`,
            mine,
            pageSize,
            checkResourceListItem,
          );
          expect(walked.problems).toEqual([]);
          expect(walked.items.map((r) => r.slug)).toEqual(expected);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('D16: walking every page of a history yields each visible version once, newest first', async () => {
    await fc.assert(
      fc.asyncProperty(
        versions,
        fc.constantFrom<'svc' | 'org'>('svc', 'org'),
        fc.integer({ min: 1, max: 4 }),
        async (statuses, owner, pageSize) => {
          const db = backend.databases.primary;
          await clearStorage(db);
          await givenAccount(db, 'mine');
          const catalog = await givenCatalog(db, {
            slug: 'target',
            accountId: owner === 'svc' ? null : 'mine',
          });
          const resource = await givenResource(backend, catalog, {
            slug: 'doc',
            versions: statuses.map((status, i) => ({ version: `v${i}`, content: `content ${i}`, status })),
          });
          const expected = resource.versions
            .filter((_v, i) => owner === 'org' || statuses[i] !== 'draft')
            .map((v) => v.id)
            .reverse();

          const walked = await walk<{ id: string }>(
            `/v3/playbook/resources/${resource.id}/versions`,
            mine,
            pageSize,
            checkVersionSummary,
          );
          expect(walked.problems).toEqual([]);
          expect(walked.items.map((v) => v.id)).toEqual(expected);
        },
      ),
      { numRuns: 30 },
    );
  });
});
