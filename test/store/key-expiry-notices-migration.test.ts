import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyExpiryNotices } from '../../src/auth/key-expiry-notices.js';
import { UnitOfWork } from '../../src/changes/unit-of-work.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { loggedChanges } from '../helpers/changes.js';

const DAY_MS = 86_400_000;

/**
 * D32: keys made before expiry notices existed. When a threshold was crossed is not known, so the
 * migration counts the thresholds their expiry is already within as crossed before it was set: no
 * late notice for them, and the nearer ones are still made.
 */
describe('keys that expire, made before expiry notices (D32)', () => {
  let backend: TestBackend;
  const at = '2026-01-01T00:00:00.000Z';
  const now = Date.now();
  const expiries = {
    InThreeDays00001: new Date(now + 3 * DAY_MS).toISOString(),
    InHalfADay000001: new Date(now + DAY_MS / 2).toISOString(),
    InAMonth00000001: new Date(now + 30 * DAY_MS).toISOString(),
  };

  beforeAll(async () => {
    backend = await createTestBackend({ migrateTo: '0016-key-usage' });
    const db = backend.databases.primary;
    await sql`insert into accounts (id, name, plan, created_at, updated_at) values ('acme', null, 'free', ${at}, ${at})`.execute(
      db,
    );
    for (const [id, expiresAt] of Object.entries(expiries)) {
      await sql`insert into api_keys (id, account_id, name, scopes, environment, secret_hash, created_by, created_at, expires_at)
        values (${id}, 'acme', 'ci', '["playbook:read"]', 'test', ${'0'.repeat(64)}, 'ada', ${at}, ${expiresAt})`.execute(
        db,
      );
    }
    await migrateToLatest(backend.databases);
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('records the thresholds already crossed, and notices only the ones crossed later', async () => {
    const db = backend.databases.primary;
    const rows = await db
      .selectFrom('api_key_expiry_notices')
      .select(['key_id', 'threshold', 'noticed_at'])
      .orderBy('key_id')
      .orderBy('threshold')
      .execute();
    expect(rows).toEqual([
      { key_id: 'InHalfADay000001', threshold: '1d', noticed_at: null },
      { key_id: 'InHalfADay000001', threshold: '7d', noticed_at: null },
      { key_id: 'InThreeDays00001', threshold: '7d', noticed_at: null },
    ]);
    let clock = now + 60_000;
    const notices = new KeyExpiryNotices(db, new UnitOfWork(db), { now: () => clock });
    expect(await notices.sweep()).toBe(0);
    clock = now + 2 * DAY_MS + 60_000;
    expect(await notices.sweep()).toBe(1);
    const made = (await loggedChanges(db, 'acme')).filter((change) => change.type === 'api_key.expiring');
    expect(made.map((change) => change.target.id)).toEqual(['InThreeDays00001']);
  });
});
