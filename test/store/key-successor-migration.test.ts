import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/db/migrate.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

/**
 * D29: the migration that gives a key its successor (`replaced_by`) reads the successors of keys
 * rolled before it from the change log, so that those keys are not rolled a second time either.
 */
describe('keys rolled before the successor column (D29)', () => {
  let backend: TestBackend;
  const at = '2026-01-01T00:00:00.000Z';

  beforeAll(async () => {
    backend = await createTestBackend({ migrateTo: '0009-webhooks' });
    const db = backend.databases.primary;
    await sql`insert into accounts (id, name, plan, created_at, updated_at) values ('acme', null, 'free', ${at}, ${at})`.execute(
      db,
    );
    for (const id of ['OldKey0000000001', 'NewKey0000000001', 'NewKey0000000002', 'Plain00000000001']) {
      await sql`insert into api_keys (id, account_id, name, scopes, environment, secret_hash, created_by, created_at)
        values (${id}, 'acme', 'ci', '["playbook:read"]', 'test', ${'0'.repeat(64)}, 'ada', ${at})`.execute(
        db,
      );
    }
    // Rolled twice before a key could only be rolled once: the later successor is the one kept.
    const rolls = [
      [1, 'OldKey0000000001', 'API key OldKey0000000001 rolled; replaced by NewKey0000000001'],
      [2, 'Plain00000000001', 'API key Plain00000000001 created'],
      [3, 'OldKey0000000001', 'API key OldKey0000000001 rolled; replaced by NewKey0000000002'],
    ] as const;
    for (const [seq, target, summary] of rolls) {
      const type = summary.includes('rolled') ? 'api_key.rolled' : 'api_key.created';
      await sql`insert into changes (seq, id, at, namespace, type, target_kind, target_id, actor_type, summary)
        values (${seq}, ${`0190000${seq}-0000-7000-8000-000000000000`}, ${at}, 'acme', ${type}, 'api_key', ${target}, 'user', ${summary})`.execute(
        db,
      );
    }
    await migrateToLatest(backend.databases);
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('names the latest successor of a rolled key, and none for the others', async () => {
    const rows = await backend.databases.primary
      .selectFrom('api_keys')
      .select(['id', 'replaced_by'])
      .orderBy('id')
      .execute();
    expect(rows).toEqual([
      { id: 'NewKey0000000001', replaced_by: null },
      { id: 'NewKey0000000002', replaced_by: null },
      { id: 'OldKey0000000001', replaced_by: 'NewKey0000000002' },
      { id: 'Plain00000000001', replaced_by: null },
    ]);
  });
});
