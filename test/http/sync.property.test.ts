import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import {
  importService,
  listAll,
  listed,
  Mirror,
  type Page,
  resourceFile,
  syncRequest,
} from '../helpers/sync-feed.js';

/**
 * D27 as a property, on both stacks: whatever sequence of imports (the service's), publications and
 * archives (two accounts') happens, with followers reading pages between the writes, a follower that
 * applies the pages it reads holds, once it has caught up, exactly what the list operations show its
 * caller: the Catalogs, their Resources, and each Resource's current version as its history lists it.
 */

type Status = 'draft' | 'active' | 'archived';
type Account = 'acme' | 'globex';
const STATUSES: Status[] = ['draft', 'active', 'archived'];
const RESOURCE_SLUGS = ['r1', 'r2', 'r3', 'r4'];

/** A Resource as a write gives it: whether its content changes, and its status. */
const resourceSpec = fc.record({
  slug: fc.constantFrom(...RESOURCE_SLUGS),
  change: fc.boolean(),
  status: fc.constantFrom(...STATUSES),
});
const resourceSpecs = fc.uniqueArray(resourceSpec, { maxLength: 4, selector: (spec) => spec.slug });

const command = fc.oneof(
  fc.record({
    op: fc.constant('import' as const),
    catalog: fc.constantFrom('alpha', 'beta'),
    status: fc.constantFrom(...STATUSES),
    resources: resourceSpecs,
  }),
  fc.record({
    op: fc.constant('publish' as const),
    account: fc.constantFrom<Account>('acme', 'globex'),
    catalog: fc.constantFrom('one', 'two'),
    status: fc.constantFrom(...STATUSES),
    resources: resourceSpecs,
  }),
  fc.record({
    op: fc.constant('putResource' as const),
    account: fc.constantFrom<Account>('acme', 'globex'),
    catalog: fc.constantFrom('one', 'two'),
    resource: resourceSpec,
  }),
  fc.record({
    op: fc.constant('archiveResource' as const),
    account: fc.constantFrom<Account>('acme', 'globex'),
    catalog: fc.constantFrom('one', 'two'),
    resource: fc.constantFrom(...RESOURCE_SLUGS),
  }),
  fc.record({
    op: fc.constant('archiveCatalog' as const),
    account: fc.constantFrom<Account>('acme', 'globex'),
    catalog: fc.constantFrom('one', 'two'),
  }),
  fc.record({
    op: fc.constant('read' as const),
    follower: fc.integer({ min: 0, max: 2 }),
    pageSize: fc.integer({ min: 1, max: 3 }),
  }),
);
type Command = typeof command extends fc.Arbitrary<infer C> ? C : never;

/** A follower: its caller, its copy, and where it is in the feed. */
interface Follower {
  readonly name: string;
  readonly headers: Record<string, string>;
  mirror: Mirror;
  /** Left mid-sync by a read: it catches up after the next step, with writes between its pages. */
  paused?: boolean;
  pageToken?: string | undefined;
  syncToken?: string | undefined;
}

describe('sync property (D27)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  const writers = {} as Record<Account, Record<string, string>>;
  const readers = {} as Record<Account | 'nobody', Record<string, string>>;
  /** What each Resource holds now, so that changed content always gets a new label. */
  const current = new Map<string, { content: string; version: string }>();
  let counter = 0;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    for (const account of ['acme', 'globex'] as const) {
      await givenAccount(backend.databases.primary, account);
      writers[account] = (
        await identity.mintKey({ accountId: account, scopes: ['playbook:read', 'playbook:write'] })
      ).headers;
      readers[account] = (await identity.mintKey({ accountId: account })).headers;
    }
    readers.nobody = await identity.tokenHeaders({ user: 'reader', accounts: [] });
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  /** A Resource's label and content for this write: a new pair when it changes, or when it is new. */
  function version(key: string, change: boolean): { content: string; version: string } {
    const held = current.get(key);
    if (held && !change) return held;
    const made = { content: `content ${++counter}`, version: `v${counter}` };
    current.set(key, made);
    return made;
  }

  async function run(step: Command, followers: Follower[]): Promise<void> {
    switch (step.op) {
      case 'import': {
        const resources = Object.fromEntries(
          step.resources.map((spec) => [
            spec.slug,
            resourceFile(spec.slug, {
              ...version(`svc/${step.catalog}/${spec.slug}`, spec.change),
              status: spec.status,
            }),
          ]),
        );
        await importService(backend, identity, {
          [step.catalog]: {
            catalog: { name: step.catalog, version: `c${++counter}`, status: step.status },
            resources,
          },
        });
        return;
      }
      case 'publish': {
        const res = await app.inject({
          method: 'PUT',
          url: `/v3/playbook/catalogs/org/${step.catalog}`,
          headers: writers[step.account],
          payload: {
            name: step.catalog,
            version: `c${++counter}`,
            status: step.status,
            resources: step.resources.map((spec) => ({
              ...resourceFile(spec.slug, {
                ...version(`${step.account}/${step.catalog}/${spec.slug}`, spec.change),
                status: spec.status,
              }),
              slug: spec.slug,
            })),
          },
        });
        expect(res.statusCode, res.body).toBeLessThan(300);
        return;
      }
      case 'putResource': {
        const { slug, change, status } = step.resource;
        const res = await app.inject({
          method: 'PUT',
          url: `/v3/playbook/catalogs/org/${step.catalog}/resources/${slug}`,
          headers: writers[step.account],
          payload: resourceFile(slug, {
            ...version(`${step.account}/${step.catalog}/${slug}`, change),
            status,
          }),
        });
        // The Catalog may not exist yet.
        expect([200, 201, 404], res.body).toContain(res.statusCode);
        return;
      }
      case 'archiveResource':
      case 'archiveCatalog': {
        const url =
          step.op === 'archiveResource'
            ? `/v3/playbook/catalogs/org/${step.catalog}/resources/${step.resource}`
            : `/v3/playbook/catalogs/org/${step.catalog}`;
        const res = await app.inject({ method: 'DELETE', url, headers: writers[step.account] });
        expect([204, 404], res.body).toContain(res.statusCode);
        return;
      }
      case 'read': {
        // One page only: the follower goes on from there after the next step's writes.
        const follower = followers[step.follower]!;
        await readPage(follower, step.pageSize);
        follower.paused = true;
        return;
      }
    }
  }

  /** Reads the follower's next page and applies it; true when it was an empty page of changes. */
  async function readPage(follower: Follower, pageSize?: number): Promise<boolean> {
    const query = {
      ...(follower.pageToken
        ? { pageToken: follower.pageToken }
        : follower.syncToken
          ? { syncToken: follower.syncToken }
          : {}),
      ...(pageSize ? { pageSize } : {}),
    };
    const res = await syncRequest(app, follower.headers, query);
    expect(res.statusCode, `${follower.name}: ${res.body}`).toBe(200);
    const page = res.json() as Page;
    expect(Number(page.nextPageToken !== undefined) + Number(page.nextSyncToken !== undefined)).toBe(1);
    const quiet = !follower.pageToken && follower.syncToken !== undefined && page.data.length === 0;
    follower.mirror.apply(page.data);
    follower.pageToken = page.nextPageToken;
    if (page.nextSyncToken) follower.syncToken = page.nextSyncToken;
    return quiet && page.nextSyncToken !== undefined;
  }

  /** Reads until a sync from the follower's position finds nothing, then holds its copy against the lists. */
  async function expectCaughtUp(follower: Follower): Promise<void> {
    for (let pages = 0; !(await readPage(follower)); pages++) {
      expect(pages, `${follower.name} did not catch up`).toBeLessThan(100);
    }
    const lists = await listed(app, follower.headers);
    expect(follower.mirror.catalogs, `${follower.name}: catalogs`).toEqual(lists.catalogs);
    expect(follower.mirror.resources, `${follower.name}: resources`).toEqual(lists.resources);
    for (const resource of follower.mirror.resources.values()) {
      const held = resource.currentVersion as { id: string } | undefined;
      if (!held) continue;
      const history = await listAll(app, follower.headers, `/v3/playbook/resources/${resource.id}/versions`);
      expect(
        history.find((entry) => entry.id === held.id),
        `${follower.name}: ${resource.humanRef}`,
      ).toEqual(held);
    }
  }

  it('after every step, each follower that has caught up holds what the lists show its caller', {
    timeout: 600_000,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 8 }), async (steps) => {
        const followers: Follower[] = (['nobody', 'acme', 'globex'] as const).map((name) => ({
          name,
          headers: readers[name],
          mirror: new Mirror(),
        }));
        for (const step of steps) {
          const paused = new Set(followers.filter((follower) => follower.paused));
          for (const follower of paused) follower.paused = false;
          await run(step, followers);
          for (const follower of followers)
            if (!follower.paused || paused.has(follower)) await expectCaughtUp(follower);
        }
      }),
      { numRuns: backend.backendKind === 'production' ? 12 : 25 },
    );
  });
});
