import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';
import { sleep } from '../helpers/wait.js';

/**
 * PostgreSQL checks each new Resource Version against its Resource (a foreign key) with a query it
 * plans once per connection. Planned while the Resources written so far were few, that plan scans the
 * table; kept for a write of thousands, it made the write take time growing with the square of its
 * size. A large write plans each check afresh: the table is looked up by key, not scanned per row.
 */
describe('PostgreSQL: a large write looks its Resources up by key', () => {
  let backend: TestBackend;
  let identity: TestIdentity;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    await givenAccount(backend.databases.primary, 'acme');
  });
  afterAll(async () => {
    await identity?.close();
    await backend?.cleanup();
  });

  async function scansOfResources(): Promise<number> {
    const db = backend.databases.primary;
    // Statistics reach the shared counters at most once a second, and a snapshot is kept per transaction.
    await sleep(1200);
    await sql`select pg_stat_clear_snapshot()`.execute(db);
    const { rows } = await sql<{ seq_scan: string }>`
      select seq_scan from pg_stat_user_tables where relname = 'resources'`.execute(db);
    return Number(rows[0]?.seq_scan ?? 0);
  }

  it('a publish of 3,000 Resources scans the Resources table a handful of times, not once per version', async () => {
    const app = await buildIdentityApp(backend, identity);
    try {
      const writer = (
        await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] })
      ).headers;
      const resources = Array.from({ length: 3000 }, (_, i) => ({
        slug: `r-${i}`,
        kind: 'document',
        title: `Resource ${i}`,
        version: '1.0.0',
        mediaType: 'text/markdown',
        content: `# ${i}\n`,
      }));
      const before = await scansOfResources();
      const answer = await app.inject({
        method: 'PUT',
        url: '/v3/playbook/catalogs/org/many',
        headers: { ...writer, 'content-type': 'application/json' },
        payload: { name: 'Many', version: '1', resources },
      });
      expect(answer.statusCode).toBe(201);
      const scans = (await scansOfResources()) - before;
      expect(scans).toBeLessThan(300);
    } finally {
      await app.close();
    }
  });
});
