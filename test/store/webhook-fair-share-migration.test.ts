import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/db/migrate.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

/**
 * D28: the migration that shares webhook attempts fairly counts each endpoint's pending deliveries
 * from those stored, starts every endpoint with no run of timeouts, and lists the attempts made
 * before it without a reason.
 */
describe('endpoints and deliveries stored before attempts were shared fairly (D28)', () => {
  let backend: TestBackend;
  const at = '2026-01-01T00:00:00.000Z';

  beforeAll(async () => {
    backend = await createTestBackend({ migrateTo: '0013-stored-details' });
    const db = backend.databases.primary;
    await sql`insert into accounts (id, name, plan, created_at, updated_at) values ('acme', null, 'free', ${at}, ${at})`.execute(
      db,
    );
    for (const id of ['busy', 'idle']) {
      await sql`insert into webhook_endpoints
          (id, account_id, url, events, description, status, secret_sealed, secret_key_id, created_at, updated_at, failing_since)
        values (${id}, 'acme', 'https://hooks.example.com/', '["*"]', null, 'enabled', 'sealed', 'key', ${at}, ${at}, null)`.execute(
        db,
      );
    }
    const deliveries = [
      ['d1', 'busy', 'pending'],
      ['d2', 'busy', 'pending'],
      ['d3', 'busy', 'succeeded'],
      ['d4', 'busy', 'failed'],
      ['d5', 'idle', 'succeeded'],
    ] as const;
    for (const [id, endpoint, status] of deliveries) {
      await sql`insert into webhook_deliveries
          (id, endpoint_id, change_seq, event_id, event_type, payload, status, attempts, next_attempt_at, created_at, updated_at)
        values (${id}, ${endpoint}, null, ${`event-${id}`}, 'webhook.test', '{}', ${status}, 1, ${at}, ${at}, ${at})`.execute(
        db,
      );
    }
    await sql`insert into webhook_attempts
        (id, delivery_id, endpoint_id, attempt, at, outcome, status_code, duration_ms, error, next_attempt_at)
      values ('a1', 'd4', 'busy', 1, ${at}, 'failed', 500, 12, 'answered 500', null)`.execute(db);
    await migrateToLatest(backend.databases);
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('counts what is pending to each endpoint, with no run of timeouts, and keeps earlier attempts', async () => {
    const db = backend.databases.primary;
    const endpoints = await db
      .selectFrom('webhook_endpoints')
      .select(['id', 'pending_deliveries', 'timeouts_in_a_row'])
      .orderBy('id')
      .execute();
    expect(endpoints).toEqual([
      { id: 'busy', pending_deliveries: 2, timeouts_in_a_row: 0 },
      { id: 'idle', pending_deliveries: 0, timeouts_in_a_row: 0 },
    ]);
    const attempts = await db.selectFrom('webhook_attempts').select(['id', 'error', 'reason']).execute();
    expect(attempts).toEqual([{ id: 'a1', error: 'answered 500', reason: null }]);
  });
});
