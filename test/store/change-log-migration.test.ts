import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuditLog } from '../../src/audit/audit-log.js';
import { readHead } from '../../src/changes/change-log.js';
import { UnitOfWork } from '../../src/changes/unit-of-work.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';

/**
 * D26: the migration to the change log carries the audit trail's events into the log, oldest first,
 * with their ids, times, actors and request ids, names their targets by id where the target still
 * exists, and leaves the audit list answering what it answered before, in the log's terms.
 */

const events = [
  [
    '01900000-0000-7000-8000-000000000001',
    '2026-01-01T00:00:01.000Z',
    'api-key:AbCdEfGh12345678',
    'api_key.created',
    'user',
    'ada',
    'API key AbCdEfGh12345678 created',
  ],
  [
    '01900000-0000-7000-8000-000000000002',
    '2026-01-01T00:00:02.000Z',
    'catalog:org/handbook',
    'catalog.published',
    'api-key',
    'AbCdEfGh12345678',
    '2 created, 0 updated, 0 superseded, 0 archived, a catalog version published',
  ],
  [
    '01900000-0000-7000-8000-000000000003',
    '2026-01-01T00:00:03.000Z',
    'resource:org/handbook/intro',
    'resource.published',
    'api-key',
    'AbCdEfGh12345678',
    '1 created, 0 updated, 0 superseded, 0 archived',
  ],
  [
    '01900000-0000-7000-8000-000000000004',
    '2026-01-01T00:00:04.000Z',
    'catalog:org/handbook',
    'catalog_version.published',
    'user',
    'ada',
    'catalog version 2 published: 2 pins',
  ],
  [
    '01900000-0000-7000-8000-000000000005',
    '2026-01-01T00:00:05.000Z',
    'catalog:org/gone',
    'catalog.archived',
    'api-key',
    'AbCdEfGh12345678',
    'catalog org/gone archived',
  ],
  [
    '01900000-0000-7000-8000-000000000006',
    '2026-01-01T00:00:06.000Z',
    'api-key:AbCdEfGh12345678',
    'api_key.leak_revoked',
    'leak-report',
    null,
    'API key AbCdEfGh12345678 revoked: reported leaked',
  ],
] as const;

describe('carrying the audit trail into the change log (D26)', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend({ migrateTo: '0005-audit-events' });
    const db = backend.databases.primary;
    const at = '2026-01-01T00:00:00.000Z';
    await sql`insert into accounts (id, name, plan, created_at, updated_at) values ('acme', null, 'free', ${at}, ${at})`.execute(
      db,
    );
    await sql`insert into catalogs (id, account_id, slug, name, status, created_at, updated_at)
      values ('cat-1', 'acme', 'handbook', 'Handbook', 'active', ${at}, ${at})`.execute(db);
    await sql`insert into resources (id, catalog_id, slug, kind, title, status, manifest, created_at, updated_at)
      values ('res-1', 'cat-1', 'intro', 'document', 'Intro', 'active', '{}', ${at}, ${at})`.execute(db);
    // Stored in another order than their times: the log is in the order they happened.
    for (const [id, time, target, action, actorType, actorId, summary] of [...events].reverse()) {
      await sql`insert into audit_events (id, at, account_id, actor_type, actor_id, action, target, request_id, summary)
        values (${id}, ${time}, 'acme', ${actorType}, ${actorId}, ${action}, ${target}, ${`req-${id.slice(-1)}`}, ${summary})`.execute(
        db,
      );
    }
    // Writes of Catalog data moved the head before there was a log: it never moves back.
    await sql`update data_generation set generation = 40 where id = 1`.execute(db);
    await migrateToLatest(backend.databases);
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('appends one change per event, in time order, with the head at the last', async () => {
    const db = backend.databases.primary;
    const changes = await loggedChanges(db);
    expect(changes.map((change) => [change.seq, change.id, change.type])).toEqual([
      [1, events[0][0], 'api_key.created'],
      [2, events[1][0], 'catalog.version_published'],
      [3, events[2][0], 'resource.created'],
      [4, events[3][0], 'catalog.version_published'],
      [5, events[4][0], 'catalog.archived'],
      [6, events[5][0], 'api_key.leak_revoked'],
    ]);
    expect(await readHead(db)).toBe(40);
    expect(changes.map((change) => change.target)).toEqual([
      { kind: 'api_key', id: 'AbCdEfGh12345678' },
      { kind: 'catalog', id: 'cat-1', humanRef: 'org/handbook' },
      { kind: 'resource', id: 'res-1', humanRef: 'org/handbook/intro' },
      { kind: 'catalog', id: 'cat-1', humanRef: 'org/handbook' },
      // No Catalog has that ref any more: the ref stands for it.
      { kind: 'catalog', id: 'org/gone', humanRef: 'org/gone' },
      { kind: 'api_key', id: 'AbCdEfGh12345678' },
    ]);
    expect(changes[5]).toMatchObject({
      actor: { type: 'leak-report' },
      namespace: 'acme',
      requestId: 'req-6',
    });
    expect(changes[1]).toMatchObject({
      actor: { type: 'api-key', id: 'AbCdEfGh12345678' },
      at: events[1][1],
    });
    // Left for one release, unread: instances of the previous one still write to it while they drain.
    const tables = await db.introspection.getTables();
    expect(tables.map((table) => table.name)).toContain('audit_events');
  });

  it('a write after the migration takes the number after the head, and the log follows in order', async () => {
    const db = backend.databases.primary;
    await new UnitOfWork(db).run('account-set', { actor: { type: 'operator' } }, async (write) => {
      await write.append([
        {
          namespace: 'acme',
          type: 'account.plan_changed',
          target: { kind: 'account', id: 'acme' },
          summary: 'x',
        },
      ]);
    });
    const changes = await loggedChanges(db);
    expect(changes.at(-1)?.seq).toBe(41);
    expect(await readHead(db)).toBe(41);
  });

  it('the audit list answers from the log: newest first, the same fields, targets as before', async () => {
    const page = await new AuditLog(backend.databases.primary).listFor({ accounts: ['acme'] }, 'acme', {
      pageSize: 100,
    });
    expect(page.meta.total).toBe(7);
    const carried = page.data.slice(1);
    expect(carried.map((event) => event.target)).toEqual([...events].reverse().map((event) => event[2]));
    expect(carried[5]).toEqual({
      id: events[0][0],
      at: events[0][1],
      accountId: 'acme',
      actor: { type: 'user', id: 'ada' },
      action: 'api_key.created',
      target: 'api-key:AbCdEfGh12345678',
      requestId: 'req-1',
      summary: events[0][6],
    });
  });
});
