import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabases, type Databases, DEFAULT_POSTGRES_LIMITS } from '../../src/db/create-db.js';
import { statementName } from '../../src/db/named-statements.js';
import { PreparedQuery } from '../../src/db/prepared-query.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';

/**
 * D30 on PostgreSQL: the queries built once are kept prepared on each connection by name, so the
 * server plans them once per connection rather than on every read; every other statement is sent
 * unnamed. `PLAYBOOK_DATABASE_PREPARED_STATEMENTS=false` (a pooler that cannot carry them) sends
 * them all unnamed.
 */
describe('named statements on PostgreSQL', () => {
  let backend: TestBackend;
  const opened: Databases[] = [];

  /** The service's databases over one connection, so that the session asked is the one that ran. */
  const open = (preparedStatements: boolean) => {
    const databases = createDatabases(
      { kind: 'postgres', url: backend.env.PLAYBOOK_DATABASE_URL!, preparedStatements },
      { ...DEFAULT_POSTGRES_LIMITS, poolSize: 1 },
    );
    opened.push(databases);
    return databases.primary;
  };
  const preparedOn = async (db: ReturnType<typeof open>) =>
    (await sql<{ name: string }>`select name from pg_prepared_statements`.execute(db)).rows.map(
      (row) => row.name,
    );

  const byPlan = new PreparedQuery(['plan'], (db, slot, _shape: 'one') =>
    db.selectFrom('accounts').select(['id', 'plan']).where('plan', '=', slot.plan).orderBy('id'),
  );

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme', 'free');
    await givenAccount(backend.databases.primary, 'globex', 'pro');
  });
  afterAll(async () => {
    for (const databases of opened) await databases.close();
    await backend?.cleanup();
  });

  it('keeps a query built once prepared under its name, and answers each run with its own values', async () => {
    const db = open(true);
    expect((await byPlan.run(db, 'one', { plan: 'pro' })).map((row) => row.id)).toEqual(['globex']);
    expect((await byPlan.run(db, 'one', { plan: 'free' })).map((row) => row.id)).toEqual(['acme']);
    const compiled = db.selectFrom('accounts').select(['id', 'plan']).where('plan', '=', 'x').orderBy('id');
    const name = statementName(compiled.compile().sql);
    expect(name).toMatch(/^playbook_[0-9a-f]{24}$/);
    const prepared = await preparedOn(db);
    // Prepared once, used twice; the statements built afresh (the question itself) are not kept.
    expect(prepared).toEqual([name]);
  });

  it('still answers after a table it reads gains a column (a migration while instances serve)', async () => {
    const db = open(true);
    expect(await byPlan.run(db, 'one', { plan: 'pro' })).toEqual([{ id: 'globex', plan: 'pro' }]);
    await sql`alter table accounts add column prepared_statements_probe text`.execute(
      backend.databases.primary,
    );
    try {
      expect(await byPlan.run(db, 'one', { plan: 'pro' })).toEqual([{ id: 'globex', plan: 'pro' }]);
    } finally {
      await sql`alter table accounts drop column prepared_statements_probe`.execute(
        backend.databases.primary,
      );
    }
  });

  it('sends every statement unnamed when turned off', async () => {
    const db = open(false);
    expect((await byPlan.run(db, 'one', { plan: 'pro' })).map((row) => row.id)).toEqual(['globex']);
    expect(await preparedOn(db)).toEqual([]);
  });
});
