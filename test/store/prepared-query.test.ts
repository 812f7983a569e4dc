import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PreparedQuery } from '../../src/db/prepared-query.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';

/**
 * A query built once and run with new values (db/prepared-query.ts) answers what the same query built
 * afresh answers, for each value and each shape, on every backend, and inside a transaction too.
 */
describe('prepared queries', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'free');
    await givenAccount(db, 'globex', 'pro');
    await givenAccount(db, 'initech', 'pro');
  });

  afterAll(async () => {
    await backend?.cleanup();
  });

  const byPlan = new PreparedQuery(['plan', 'id'], (db, slot, shape: 'plan' | 'plan-or-id') =>
    db
      .selectFrom('accounts')
      .select('id')
      .where((eb) =>
        shape === 'plan'
          ? eb('plan', '=', slot.plan)
          : eb.or([eb('plan', '=', slot.plan), eb('id', '=', slot.id)]),
      )
      .where('id', '!=', 'nobody')
      .orderBy('id'),
  );

  it('answers each run with its own values, as the query built afresh does', async () => {
    const db = backend.databases.reader;
    const ids = async (shape: 'plan' | 'plan-or-id', plan: string, id: string | null) =>
      (await byPlan.run(db, shape, { plan, id })).map((row) => row.id);
    expect(await ids('plan', 'pro', null)).toEqual(['globex', 'initech']);
    expect(await ids('plan', 'free', null)).toEqual(['acme']);
    expect(await ids('plan', 'enterprise', null)).toEqual([]);
    expect(await ids('plan-or-id', 'free', 'initech')).toEqual(['acme', 'initech']);
    expect(await ids('plan', 'pro', null)).toEqual(['globex', 'initech']);
    const afresh = await db
      .selectFrom('accounts')
      .select('id')
      .where('plan', '=', 'pro')
      .orderBy('id')
      .execute();
    expect(afresh.map((row) => row.id)).toEqual(['globex', 'initech']);
  });

  it('takes a value that looks like SQL as a value', async () => {
    const rows = await byPlan.run(backend.databases.reader, 'plan-or-id', {
      plan: "x' or '1'='1",
      id: "acme' --",
    });
    expect(rows).toEqual([]);
  });

  it('runs inside a transaction, and sees its writes', async () => {
    await expect(
      backend.databases.primary.transaction().execute(async (trx) => {
        await trx.updateTable('accounts').set({ plan: 'pro' }).where('id', '=', 'acme').execute();
        expect((await byPlan.run(trx, 'plan', { plan: 'pro', id: null })).map((row) => row.id)).toEqual([
          'acme',
          'globex',
          'initech',
        ]);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    const rows = await byPlan.run(backend.databases.primary, 'plan', { plan: 'pro', id: null });
    expect(rows.map((row) => row.id)).toEqual(['globex', 'initech']);
  });

  it('is built once for a database and the transactions run on it, not once per transaction', async () => {
    const db = backend.databases.reader;
    let builds = 0;
    const counted = new PreparedQuery(['id'], (qb, slot, _shape: 'any') => {
      builds += 1;
      return qb.selectFrom('accounts').select('plan').where('id', '=', slot.id);
    });
    expect(await counted.run(db, 'any', { id: 'acme' })).toEqual([{ plan: 'free' }]);
    for (const id of ['globex', 'initech']) {
      const rows = await db.transaction().execute((trx) => counted.run(trx, 'any', { id }));
      expect(rows).toEqual([{ plan: 'pro' }]);
    }
    expect(builds).toBe(1);
  });

  it('refuses a query whose value is written into its text rather than passed', async () => {
    const literal = new PreparedQuery(['plan'], (db, slot, _shape: 'one') =>
      db
        .selectFrom('accounts')
        .select('id')
        .where(sql<boolean>`plan = ${sql.lit(slot.plan)}`),
    );
    await expect(literal.run(backend.databases.reader, 'one', { plan: 'pro' })).rejects.toThrow(
      'outside its parameters',
    );
  });

  it('refuses a query that reads every column (`*`), which a column added by a migration would break on PostgreSQL', async () => {
    const everything = new PreparedQuery(['plan'], (db, slot, _shape: 'one') =>
      db.selectFrom('accounts').selectAll().where('plan', '=', slot.plan),
    );
    const everythingOfOne = new PreparedQuery(['plan'], (db, slot, _shape: 'one') =>
      db.selectFrom('accounts').selectAll('accounts').where('plan', '=', slot.plan),
    );
    for (const query of [everything, everythingOfOne])
      await expect(query.run(backend.databases.reader, 'one', { plan: 'pro' })).rejects.toThrow(
        'names the columns it reads',
      );
    // A count is not a list of columns.
    const counted = new PreparedQuery(['plan'], (db, slot, _shape: 'one') =>
      db
        .selectFrom('accounts')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('plan', '=', slot.plan),
    );
    const [row] = await counted.run(backend.databases.reader, 'one', { plan: 'pro' });
    expect(Number(row!.n)).toBe(2);
  });
});
