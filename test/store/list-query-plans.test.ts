import { CompiledQuery } from 'kysely';
import { v7 as uuidv7 } from 'uuid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../../src/auth/principal.js';
import * as repo from '../../src/catalog/read-repository.js';
import type { Db } from '../../src/db/tables.js';
import { RESOURCE_KINDS, type ResourceKind } from '../../src/schemas/playbook.js';
import { createTestBackend, loggedDb, type TestBackend } from '../helpers/backend.js';
import { seedCatalog } from './support.js';

/**
 * The list queries on a large catalog use their indexes: the query plan of each page and count is
 * read with EXPLAIN and must reach `resources` through an index, never by reading the whole table.
 * The big catalog holds 20,000 Resources among 60,000, as one large tenant among many would.
 */

const BIG = 20_000;
const OTHER_CATALOGS = 40;
const PER_OTHER = 1000;
const BATCH = 1000;

const svcCaller: Principal = {
  accountId: null,
  plan: 'free',
  scopes: new Set(['playbook:read']),
  credential: { kind: 'api-key', keyId: 'plans' },
  restrictions: null,
};

interface Captured {
  readonly sql: string;
  readonly parameters: readonly unknown[];
}

/** A second connection to the same database that records every statement the repository sends. */
function recordingDb(backend: TestBackend, captured: Captured[]): { db: Db; close(): Promise<void> } {
  const db = loggedDb(backend, (event) => {
    if (event.level === 'query') captured.push({ sql: event.query.sql, parameters: event.query.parameters });
  });
  return { db, close: () => db.destroy() };
}

async function insertInBatches<T>(rows: T[], insert: (batch: T[]) => Promise<unknown>): Promise<void> {
  for (let start = 0; start < rows.length; start += BATCH) await insert(rows.slice(start, start + BATCH));
}

async function givenCatalogWith(db: Db, accountId: string | null, slug: string, count: number) {
  const catalogId = await seedCatalog(db, slug, accountId);
  const at = new Date().toISOString();
  const resources = Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    versionId: uuidv7(),
    slug: `resource-${String(i).padStart(6, '0')}`,
    kind: RESOURCE_KINDS[i % RESOURCE_KINDS.length]!,
    // One in ten is a draft, which only the owning account sees.
    status: i % 10 === 0 ? ('draft' as const) : ('active' as const),
  }));
  await insertInBatches(resources, (batch) =>
    db
      .insertInto('resources')
      .values(
        batch.map((r) => ({
          id: r.id,
          catalog_id: catalogId,
          slug: r.slug,
          kind: r.kind,
          title: r.slug,
          status: r.status,
          description: null,
          facets: null,
          manifest: '{}',
          current_version_id: r.versionId,
          created_at: at,
          updated_at: at,
          archived_at: null,
        })),
      )
      .execute(),
  );
  await insertInBatches(resources, (batch) =>
    db
      .insertInto('resource_versions')
      .values(
        batch.map((r) => ({
          id: r.versionId,
          resource_id: r.id,
          version: '1.0.0',
          content_hash: '0'.repeat(64),
          content_size_bytes: 1,
          media_type: 'text/markdown',
          storage_backend: 'database-text',
          status: r.status === 'draft' ? 'draft' : 'published',
          manifest: '{}',
          published_at: at,
          superseded_at: null,
          archived_at: null,
          created_at: at,
        })),
      )
      .execute(),
  );
  return { id: catalogId, firstResourceId: resources[0]!.id, secondResourceId: resources[1]!.id };
}

/** The plan of one captured statement, one line per step. */
async function explain(db: Db, dialect: 'sqlite' | 'postgres', query: Captured): Promise<string[]> {
  const prefix = dialect === 'postgres' ? 'explain' : 'explain query plan';
  const result = await db.executeQuery<Record<string, string>>(
    CompiledQuery.raw(`${prefix} ${query.sql}`, [...query.parameters]),
  );
  return result.rows.map((row) => (dialect === 'postgres' ? row['QUERY PLAN']! : row.detail!));
}

/** Reading every row of a table, in either dialect's words. */
function fullScans(plan: readonly string[], table: string): string[] {
  const pattern = new RegExp(`Seq Scan on ${table}\\b|^SCAN ${table}\\b`);
  return plan.filter((line) => pattern.test(line.trim()));
}

/** A sort after reading: the rows did not come out of an index in page order. */
function sorts(plan: readonly string[]): string[] {
  return plan.filter((line) => /^(->\s*)?Sort\b|TEMP B-TREE FOR ORDER BY/.test(line.trim()));
}

describe('list query plans on a large catalog', () => {
  let backend: TestBackend;
  let recorder: { db: Db; close(): Promise<void> };
  const captured: Captured[] = [];
  let big: { id: string; firstResourceId: string; secondResourceId: string };

  beforeAll(async () => {
    backend = await createTestBackend();
    const db = backend.databases.primary;
    await db
      .insertInto('accounts')
      .values({ id: 'acme', name: 'acme', plan: 'free', created_at: 'x', updated_at: 'x' })
      .execute();
    big = await givenCatalogWith(db, null, 'big', BIG);
    for (let i = 0; i < OTHER_CATALOGS; i++) {
      await givenCatalogWith(db, i % 2 === 0 ? null : 'acme', `catalog-${i}`, PER_OTHER);
    }
    recorder = recordingDb(backend, captured);
    // Production PostgreSQL keeps statistics and the visibility map current with autovacuum; a
    // database filled a moment ago has neither, and plans made without them say nothing.
    if (backend.databases.dialect === 'postgres') {
      await recorder.db.executeQuery(CompiledQuery.raw('vacuum analyze'));
    }
  }, 180_000);
  afterAll(async () => {
    await recorder?.close();
    await backend?.cleanup();
  });

  /** Runs one repository call and returns the plan of every statement it sent. */
  async function plansOf(run: (db: Db) => Promise<unknown>): Promise<string[][]> {
    captured.length = 0;
    await run(recorder.db);
    const plans: string[][] = [];
    for (const query of [...captured])
      plans.push(await explain(recorder.db, backend.databases.dialect, query));
    return plans;
  }

  const window = (page: number) => ({ offset: (page - 1) * 20, limit: 20 });
  const svcBig = (): repo.VisibleCatalog => ({ id: big.id, account_id: null, slug: 'big' });
  const accountBig = (): repo.VisibleCatalog => ({ id: big.id, account_id: 'acme', slug: 'big' });
  const workflowAndPolicy: ResourceKind[] = ['workflow', 'policy'];

  /** A page read as the service reads it: from the list's positions, found first (outside the plans). */
  const page =
    (catalog: () => repo.VisibleCatalog, kinds: ResourceKind[], number: number) => async (db: Db) => {
      const positions = await repo.resourcePositions(backend.databases.reader, catalog(), kinds);
      return repo.listResources(db, catalog(), kinds, window(number), positions);
    };

  // [name, the call, whether its rows must come out of the index already in page order]
  const cases: [string, (db: Db) => Promise<unknown>, boolean][] = [
    ['page 1', page(svcBig, [], 1), true],
    ['page 50', page(svcBig, [], 50), true],
    ['page 1 for the owning account', page(accountBig, [], 1), true],
    ['positions', (db) => repo.resourcePositions(db, svcBig(), []), false],
    ['positions for an account', (db) => repo.resourcePositions(db, accountBig(), []), false],
    ['page 1 of one kind', page(svcBig, ['workflow'], 1), true],
    ['positions of one kind', (db) => repo.resourcePositions(db, svcBig(), ['workflow']), false],
    ['page 1 of two kinds', page(svcBig, workflowAndPolicy, 1), false],
    ['positions of two kinds', (db) => repo.resourcePositions(db, svcBig(), workflowAndPolicy), false],
    ['version history', (db) => repo.listVersions(db, svcCaller, big.firstResourceId, window(1)), true],
  ];

  it.each(cases)('%s reaches resources and versions through an index', async (_name, run, ordered) => {
    const plans = await plansOf(run);
    expect(plans.length).toBeGreaterThan(0);
    for (const plan of plans) {
      const text = plan.join('\n');
      expect(fullScans(plan, 'resources'), text).toEqual([]);
      expect(fullScans(plan, 'resource_versions'), text).toEqual([]);
      if (ordered) expect(sorts(plan), text).toEqual([]);
    }
  });

  // On SQLite a detail is read a table at a time, in one read transaction (D30); on PostgreSQL in one
  // joined statement. Either way every table is reached by its key.
  const details: [string, (db: Db) => Promise<repo.ResourceDetailRow | undefined>][] = [
    ['by id', (db) => repo.findResource(db, svcCaller, big.secondResourceId)],
    ['by ref', (db) => repo.findResourceByRef(db, svcCaller, 'svc', 'big', 'resource-000001')],
  ];

  it.each(details)('a Resource detail read %s reaches every table through an index', async (_name, read) => {
    let found: repo.ResourceDetailRow | undefined;
    const plans = await plansOf(async (db) => {
      found = await read(db);
    });
    expect(found?.resource.id).toBe(big.secondResourceId);
    expect(found?.currentVersion.version).toBe('1.0.0');
    expect(found?.storedContent).toBeNull();
    expect(plans.filter((plan) => plan.length > 0).length).toBeGreaterThan(0);
    for (const plan of plans) {
      const text = plan.join('\n');
      // PostgreSQL reads a table of a few rows (the Catalogs here, the content kept in the database: none)
      // whole when that costs less than its index; SQLite's plans do not weigh sizes.
      const tables =
        backend.databases.dialect === 'sqlite'
          ? ['resources', 'resource_versions', 'catalogs', 'content_blobs']
          : ['resources', 'resource_versions'];
      for (const table of tables) expect(fullScans(plan, table), text).toEqual([]);
    }
  });

  it('a draft of a service Catalog has no detail, by id or by ref', async () => {
    await expect(repo.findResource(recorder.db, svcCaller, big.firstResourceId)).resolves.toBeUndefined();
    await expect(
      repo.findResourceByRef(recorder.db, svcCaller, 'svc', 'big', 'resource-000000'),
    ).resolves.toBeUndefined();
  });
});
