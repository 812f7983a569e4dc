import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dialectOf } from '../../src/db/tables.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

/**
 * The few statements written for one dialect (a deferred flush and a detail read a table at a time on
 * SQLite; lock timeouts, plans per row and `for update skip locked` on PostgreSQL) ask `dialectOf`,
 * which must name the backend's for every database of it, a transaction and a lent connection too.
 */
describe('dialectOf', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
  });

  afterAll(async () => {
    await backend?.cleanup();
  });

  it("names the backend's dialect for each of its databases, in a transaction and on a lent connection", async () => {
    const { databases } = backend;
    const expected = backend.backendKind === 'embedded' ? 'sqlite' : 'postgres';
    expect(databases.dialect).toBe(expected);
    for (const db of [databases.primary, databases.reader, databases.writer]) {
      expect(dialectOf(db)).toBe(expected);
      expect(await db.transaction().execute(async (trx) => dialectOf(trx))).toBe(expected);
      expect(await db.connection().execute(async (connection) => dialectOf(connection))).toBe(expected);
    }
  });
});
