import { execFileSync } from 'node:child_process';
import net from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createDatabases,
  type Databases,
  DEFAULT_POSTGRES_LIMITS,
  type PostgresLimits,
} from '../../src/db/create-db.js';
import { handleError } from '../../src/http/problem.js';
import { createTestBackend, loggedDb, type TestBackend } from '../helpers/backend.js';
import { freePort } from '../helpers/servers.js';
import { sleep } from '../helpers/wait.js';

/**
 * PostgreSQL as the service opens it (create-db.ts) and as the migrations leave it: byte-wise text,
 * separate pools for a read URL, bounded waits, and every way an unreachable or stalled server shows
 * itself answered 503 by the one error handler (problem.ts).
 */

let backend: TestBackend;
const url = () => backend.env.PLAYBOOK_DATABASE_URL!;
const opened: Databases[] = [];

function open(limits: Partial<PostgresLimits>, where = url()): Databases {
  const databases = createDatabases(
    { kind: 'postgres', url: where },
    { ...DEFAULT_POSTGRES_LIMITS, ...limits },
  );
  opened.push(databases);
  return databases;
}

beforeAll(async () => {
  backend = await createTestBackend();
});
afterAll(async () => {
  for (const databases of opened) await databases.close().catch(() => {});
  await backend?.cleanup();
});

describe('PostgreSQL schema', () => {
  it('runs on a database whose default order is locale-aware, unlike SQLite', async () => {
    // The premise of the next test: without explicit collations, lists would come out differently.
    const { rows } = await sql<{ before: boolean }>`select 'a-c' < 'ab' as before`.execute(
      backend.databases.primary,
    );
    expect(rows[0]!.before).toBe(false);
  });

  it('compares and orders every text column of the service byte by byte (collation "C")', async () => {
    const { rows } = await sql<{ column: string; collation: string | null }>`
      select c.table_name || '.' || c.column_name as column, c.collation_name as collation
      from information_schema.columns c
      join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
      where c.table_schema = current_schema() and t.table_type = 'BASE TABLE'
        and c.data_type = 'text' and c.table_name not like 'kysely\\_%'`.execute(backend.databases.primary);
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.filter((row) => row.collation !== 'C')).toEqual([]);
  });
});

describe('PostgreSQL pools', () => {
  it('sends reads to a pool of their own when a read URL is given, named apart for operators', async () => {
    const databases = createDatabases({ kind: 'postgres', url: url(), readUrl: url() });
    opened.push(databases);
    expect(databases.reader).not.toBe(databases.primary);
    const name = async (db: Databases['primary']) =>
      (await sql<{ name: string }>`select current_setting('application_name') as name`.execute(db)).rows[0]!
        .name;
    expect(await name(databases.primary)).toBe('playbook');
    expect(await name(databases.reader)).toBe('playbook-reader');
  });

  it('bounds every statement and every idle transaction on the server side', async () => {
    const db = backend.databases.primary;
    const setting = async (name: string) =>
      (await sql<{ value: string }>`select current_setting(${name}) as value`.execute(db)).rows[0]!.value;
    expect(await setting('statement_timeout')).toBe('5s');
    expect(await setting('idle_in_transaction_session_timeout')).toBe('1min');
  });
});

describe('PostgreSQL failures become 503 problem documents', () => {
  let app: FastifyInstance;
  let failure: () => Promise<unknown>;
  const blackholes: net.Server[] = [];

  beforeAll(async () => {
    app = Fastify();
    app.setErrorHandler(handleError);
    app.get('/fail', async () => failure());
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    for (const server of blackholes) server.close();
  });

  /** Runs `query` behind the error handler; returns the answer and how long it took. */
  async function answerTo(query: () => Promise<unknown>) {
    failure = query;
    const started = performance.now();
    const res = await app.inject({ url: '/fail' });
    return { res, ms: performance.now() - started };
  }

  function expectUnavailable(result: Awaited<ReturnType<typeof answerTo>>, boundMs: number) {
    expect(result.res.statusCode, result.res.body).toBe(503);
    expect(result.res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(result.res.json()).toMatchObject({ status: 503, code: 'unavailable' });
    expect(result.res.body).not.toMatch(/127\.0\.0\.1|postgres|select|sleep/i);
    expect(result.ms).toBeLessThan(boundMs);
  }

  /** A port that accepts connections and never says a word, like a host behind a dropped route. */
  async function blackhole(): Promise<number> {
    const server = net.createServer(() => {});
    blackholes.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return (server.address() as net.AddressInfo).port;
  }

  it('a refused connection (server down)', async () => {
    const port = await freePort();
    const db = open({}, `postgres://postgres@127.0.0.1:${port}/nothing`).primary;
    expectUnavailable(await answerTo(() => sql`select 1`.execute(db)), 1000);
  });

  it('a connection that is never answered, after the connect timeout', async () => {
    const port = await blackhole();
    const db = open({ connectTimeoutMs: 500 }, `postgres://postgres@127.0.0.1:${port}/nothing`).primary;
    expectUnavailable(await answerTo(() => sql`select 1`.execute(db)), 2000);
  });

  it('a pool with no free connection, after the same timeout', async () => {
    const db = open({ poolSize: 1, connectTimeoutMs: 300 }).primary;
    const holding = sql`select pg_sleep(1)`.execute(db);
    // Let the holder check its connection out first.
    await sleep(100);
    expectUnavailable(await answerTo(() => sql`select 1`.execute(db)), 1000);
    await holding;
  });

  it('a statement the server cancels at statement_timeout', async () => {
    const db = open({ statementTimeoutMs: 200 }).primary;
    expectUnavailable(await answerTo(() => sql`select pg_sleep(3)`.execute(db)), 1500);
  });

  it('a session the server terminates (shutdown, failover, an operator)', async () => {
    const db = open({}).primary;
    const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
    const terminate = setTimeout(async () => {
      const admin = new pg.Client({ connectionString: url() });
      await admin.connect();
      await admin.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
      await admin.end();
    }, 300);
    try {
      expectUnavailable(await answerTo(() => sql`select pg_sleep(3)`.execute(db)), 2500);
    } finally {
      clearTimeout(terminate);
    }
  });

  it('a session terminated while checked out between two statements: no uncaught error, and the pool replaces it', async () => {
    const db = open({ poolSize: 1 }).primary;
    const uncaught: unknown[] = [];
    const collect = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', collect);
    try {
      await db.connection().execute(async (connection) => {
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(connection);
        const admin = new pg.Client({ connectionString: url() });
        await admin.connect();
        await admin.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
        await admin.end();
        // The server's FATAL message arrives while this connection is lent out and runs no query.
        await sleep(300);
      });
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(db);
      expect(rows[0]!.one).toBe(1);
    } finally {
      process.off('uncaughtException', collect);
    }
    expect(uncaught).toEqual([]);
  });

  it('a server process that stalls mid-statement, at the client-side query timeout', async () => {
    const db = open({ statementTimeoutMs: 5000, queryTimeoutMs: 800 }).primary;
    const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
    const pid = rows[0]!.pid;
    // A stopped backend neither answers nor closes its socket: what a dead peer looks like.
    execFileSync('kill', ['-STOP', String(pid)]);
    try {
      expectUnavailable(await answerTo(() => sql`select 1`.execute(db)), 2000);
    } finally {
      execFileSync('kill', ['-CONT', String(pid)]);
    }
  });
});

describe("A test's own connections (loggedDb)", () => {
  /** Ends the server processes of `pids`, as `cleanup()` does when it drops the database with FORCE. */
  async function terminate(pids: readonly number[]): Promise<void> {
    const admin = new pg.Client({ connectionString: url() });
    await admin.connect();
    try {
      await admin.query('select pg_terminate_backend(pid) from unnest($1::int[]) as pid', [pids]);
    } finally {
      await admin.end();
    }
  }

  it('lose a connection the server ends, idle or closing, with no uncaught error, and replace it', async () => {
    const db = loggedDb(backend, () => {}, 2);
    const pids = async () => {
      const both = await Promise.all(
        [0, 1].map(() => sql<{ pid: number }>`select pg_backend_pid() as pid, pg_sleep(0.05)`.execute(db)),
      );
      return both.map(({ rows }) => rows[0]!.pid);
    };
    const uncaught: unknown[] = [];
    const collect = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', collect);
    let closed = false;
    try {
      // Idle in the pool: the server's FATAL message comes to a connection nobody holds.
      await terminate(await pids());
      await sleep(300);
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(db);
      expect(rows[0]!.one).toBe(1);
      // Closing: the pool's end resolves before its connections have closed.
      const last = await pids();
      closed = true;
      await db.destroy();
      await terminate(last);
      await sleep(300);
    } finally {
      process.off('uncaughtException', collect);
      if (!closed) await db.destroy();
    }
    expect(uncaught).toEqual([]);
  });
});
