import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type SqliteDatabase from 'better-sqlite3';
import {
  type CompiledQuery,
  Kysely,
  type SqliteDatabase as KyselySqliteDatabase,
  type LogEvent,
  PostgresDialect,
  SqliteDialect,
} from 'kysely';
import { LRUCache } from 'lru-cache';
import type { Pool } from 'pg';
import type { DatabaseConfig } from '../foundation/config.js';
import { PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE } from '../foundation/private-files.js';
import { type Observation, unobserved } from '../observability/observation.js';
import { namingStatements } from './named-statements.js';
import { translatingPool } from './postgres-errors.js';
import { SqliteWriterDialect } from './sqlite-writer.js';
import type { Database, Db, Dialect } from './tables.js';

export interface Databases {
  /** Writes, and reads that must see them. */
  readonly primary: Db;
  /** Reads that tolerate replica lag; the primary when no replica is configured. */
  readonly reader: Db;
  /**
   * The unit of work's transactions. On PostgreSQL, connections of their own to the primary: a write
   * transaction holds its connection from its first statement to its commit, mostly waiting for this
   * process's event loop between statements, and on the primary's pool it held one of the connections
   * that reads queue for, and queued behind them for each of its checkouts. On SQLite, the primary
   * (its one writer connection, which reads never use).
   */
  readonly writer: Db;
  /**
   * A statement's first row, read at once on SQLite's reader connection, without a promise: the
   * searches of one row by its key that answer a read not held in memory (the read model of details,
   * D30), from SQLite's page cache or the system's. Absent on PostgreSQL, where every read is a round
   * trip.
   */
  readonly readNow?: ReadNow;
  readonly dialect: Dialect;
  close(): Promise<void>;
}

/** The reader connection's page cache, in KiB (SQLite's default is 2 MiB). */
const READER_CACHE_KIB = 16 * 1024;

/** Every SQLite connection's settings: the writer's and the reader's. */
const SQLITE_PRAGMAS = [
  'journal_mode = WAL',
  // FULL: a committed import survives a power cut, not only a crash of the process.
  'synchronous = FULL',
  'foreign_keys = ON',
  'busy_timeout = 5000',
];

function sqliteFile(file: string): void {
  if (file === ':memory:') return;
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
  // Created here rather than by SQLite, which would use 0644; its -wal and -shm files copy this mode.
  fs.closeSync(fs.openSync(file, 'a', PRIVATE_FILE_MODE));
}

/**
 * The writer: its connection is on a thread of its own, so that no statement of a write, its commit
 * above all, holds the event loop (D20). That thread also makes the checkpoints (sqlite-writer.ts).
 */
function openSqliteWriter(file: string, observation: Observation): Db {
  sqliteFile(file);
  return new Kysely<Database>({
    dialect: new SqliteWriterDialect({
      ...onThreads(file),
      pragmas: SQLITE_PRAGMAS,
      checkpoints: file !== ':memory:',
    }),
    log: timed('primary', observation),
  });
}

/** What connections on threads of their own share (the writer's). */
function onThreads(file: string) {
  return {
    file,
    driver: sqliteDriverName(),
    statements: PREPARED_STATEMENTS,
    onWarning: (message: string) => process.emitWarning(message, 'PlaybookWarning'),
    // A process without its writer would answer every write with an error: it ends instead, with the
    // reason, as on any error nothing handles, and its supervisor starts it again.
    onFailure: (error: Error) =>
      process.nextTick(() => {
        throw error;
      }),
  };
}

/** A statement's first row, read at once (`Databases.readNow`). */
export type ReadNow = <R>(query: CompiledQuery<R>) => R | undefined;

/**
 * The reader: on the event loop's thread, where a read costs no more than the read itself, and where
 * a search of one row may be made without a promise (`readNow`).
 */
function openSqliteReader(file: string, observation: Observation): { db: Db; readNow: ReadNow } {
  sqliteFile(file);
  const connection = new (sqliteDriver())(file);
  for (const pragma of SQLITE_PRAGMAS) connection.pragma(pragma);
  // Reads that miss the answers in memory land anywhere in a database of millions of rows: a page
  // cache that holds the indexes' upper levels saves most of each lookup's reads of the file (D30).
  connection.pragma(`cache_size = -${READER_CACHE_KIB}`);
  const statements = withStatementCache(connection);
  const reads = observation.metrics.databaseDuration;
  const ok = { database: 'reader', outcome: 'ok' } as const;
  const readNow: ReadNow = <R>(query: CompiledQuery<R>) => {
    const started = performance.now();
    const row = (statements.prepare(query.sql) as SqliteDatabase.Statement).get(...query.parameters);
    reads.observe(ok, (performance.now() - started) / 1000);
    return row as R | undefined;
  };
  return {
    db: new Kysely<Database>({
      dialect: new SqliteDialect({ database: statements }),
      log: timed('reader', observation),
    }),
    readNow,
  };
}

/** Every statement's time into `playbook_database_query_duration_seconds` (D25). */
function timed(database: 'primary' | 'reader', observation: Observation): (event: LogEvent) => void {
  const { metrics, tracing } = observation;
  const ok = { database, outcome: 'ok' } as const;
  const error = { database, outcome: 'error' } as const;
  const attributes = { 'playbook.database': database };
  return (event) => {
    const succeeded = event.level === 'query';
    metrics.databaseDuration.observe(succeeded ? ok : error, event.queryDurationMillis / 1000);
    tracing?.record('db.query', attributes, event.queryDurationMillis, succeeded);
  };
}

/**
 * The SQLite driver for this Node.js. better-sqlite3 12 wraps its objects in the `node::ObjectWrap` that
 * Node 24 changed: a prepared statement collected by the garbage collector aborts the process
 * (`RemoveEnvironmentCleanupHook: Assertion failed: (env) != nullptr`). Version 13, built on Node-API,
 * does not, but needs Node 22 or later. Both are installed (13 under the name `better-sqlite3-napi`);
 * each process loads the one its runtime takes. They have the same API.
 */
export function sqliteDriver(): typeof SqliteDatabase {
  const require = createRequire(import.meta.url);
  return require(sqliteDriverName()) as typeof SqliteDatabase;
}

/** The package name of the SQLite driver `sqliteDriver` loads. */
export function sqliteDriverName(): string {
  return Number(process.versions.node.split('.')[0]) >= 22 ? 'better-sqlite3-napi' : 'better-sqlite3';
}

/** Distinct statements kept prepared: the service issues a few dozen shapes, `in` lists aside. */
const PREPARED_STATEMENTS = 1000;

/**
 * Kysely's SQLite driver asks better-sqlite3 to prepare every query's SQL afresh, and preparing was a
 * sixth of a read's time. Statements are reusable, so they are kept by SQL text and prepared once; one
 * that is busy (an iteration still running over it) is never handed out twice.
 */
function withStatementCache(connection: SqliteDatabase.Database): KyselySqliteDatabase {
  const statements = new LRUCache<string, SqliteDatabase.Statement>({ max: PREPARED_STATEMENTS });
  return {
    close: () => connection.close(),
    prepare: (sql) => {
      const held = statements.get(sql);
      if (held && !held.busy) return held;
      const statement = connection.prepare(sql);
      statements.set(sql, statement);
      return statement;
    },
  };
}

/**
 * Bounds on PostgreSQL work, so that an outage turns into a quick error (answered 503), never a hung
 * request: checking a connection out of the pool or opening one, a statement the server runs, and a
 * statement whose answer never arrives (a dead peer that closed nothing).
 */
export interface PostgresLimits {
  readonly poolSize: number;
  readonly connectTimeoutMs: number;
  readonly statementTimeoutMs: number;
  /** Client side, above the statement timeout so that the server's own cancellation normally wins. */
  readonly queryTimeoutMs: number;
}

export const DEFAULT_POSTGRES_LIMITS: PostgresLimits = {
  poolSize: 10,
  connectTimeoutMs: 3000,
  statementTimeoutMs: 5000,
  queryTimeoutMs: 7000,
};

/**
 * Connections of the writer's pool (`Databases.writer`). Writes take turns in their unit of work, so
 * one carries them; the second serves another unit of work of the same process, which would otherwise
 * wait for the first's commit rather than for the writers' turn (a lock it waits for a bounded time).
 */
export const WRITER_POOL_SIZE = 2;

/** Which pool of a PostgreSQL deployment: the primary's, the replica's, or the writes' (on the primary). */
type PostgresRole = 'primary' | 'reader' | 'writer';

/**
 * A PostgreSQL database whose pool opens on the first query: `pg` is loaded only by deployments that
 * use it (the embedded default never does).
 */
function openPostgres(
  url: string,
  role: PostgresRole,
  limits: PostgresLimits,
  observation: Observation,
  preparedStatements: boolean,
): Db {
  const pool = () => postgresPool(url, role, limits, observation, preparedStatements);
  return new Kysely<Database>({
    dialect: new PostgresDialect({ pool }),
    // The writer's statements are the primary's, timed and reported as its.
    log: timed(role === 'reader' ? 'reader' : 'primary', observation),
  });
}

/**
 * Makes a connection `pool` loses (a server shutdown, a terminated backend, a database dropped while
 * the pool closes) something the pool gets over rather than an uncaught exception of the process. An
 * idle client's error goes to the pool, which replaces it. pg-pool removes its own error listener while
 * a client is lent out, so a connection that drops between two queries of a checked-out client needs
 * one of its own: pg marks such a client unqueryable, and the pool discards it on release. A query
 * that is running when its connection drops still fails with the error.
 */
export function survivingLostConnections(pool: Pool): void {
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
}

async function postgresPool(
  url: string,
  role: PostgresRole,
  limits: PostgresLimits,
  observation: Observation,
  preparedStatements: boolean,
): Promise<Pool> {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({
    connectionString: url,
    max: role === 'writer' ? Math.min(WRITER_POOL_SIZE, limits.poolSize) : limits.poolSize,
    connectionTimeoutMillis: limits.connectTimeoutMs,
    idleTimeoutMillis: 30_000,
    statement_timeout: limits.statementTimeoutMs,
    query_timeout: limits.queryTimeoutMs,
    // A transaction left open by a stalled caller must not hold its locks and connection for long.
    idle_in_transaction_session_timeout: 60_000,
    keepAlive: true,
    // Names the pool in pg_stat_activity, so that operators tell writers from readers.
    application_name: role === 'primary' ? 'playbook' : `playbook-${role}`,
  });
  survivingLostConnections(pool);
  observation.metrics.observePool(role, pool);
  // A connection that cannot be opened is a failed use of the database too, timed as one (D31).
  const database = role === 'reader' ? 'reader' : 'primary';
  const failure = { database, outcome: 'error' } as const;
  // The primary and a replica are parts of the database's health: it is up while both answer, and one
  // that does not keeps it down rather than making it flip with each use of either.
  const health = observation.health?.database;
  const report = health && {
    succeeded: () => health.succeeded(database),
    failed: (error: unknown) => health.failed(error, database),
  };
  return translatingPool(
    pool,
    report,
    (milliseconds) => observation.metrics.databaseDuration.observe(failure, milliseconds / 1000),
    preparedStatements ? namingStatements : undefined,
  );
}

/** Opens the configured database (D13). Connections open lazily, on the first query. */
export function createDatabases(
  config: DatabaseConfig,
  limits: PostgresLimits = DEFAULT_POSTGRES_LIMITS,
  /** Where statements are timed and traced; metrics of their own, which nobody reads, by default. */
  observation: Observation = unobserved(),
): Databases {
  if (config.kind === 'sqlite') {
    const primary = openSqliteWriter(config.path, observation);
    // A connection of its own for reads: SQLite's driver runs one statement at a time per connection,
    // so reads on the writer's connection would wait out a long write transaction (a publish of
    // 100,000 Resources is seconds of it, D20). In WAL mode a reader sees every committed write and
    // is never blocked by the writer. An in-memory database is one connection's alone.
    const opened = config.path === ':memory:' ? undefined : openSqliteReader(config.path, observation);
    const reader = opened?.db ?? primary;
    return {
      primary,
      reader,
      writer: primary,
      ...(opened ? { readNow: opened.readNow } : {}),
      dialect: 'sqlite',
      close: async () => {
        if (reader !== primary) await reader.destroy();
        await primary.destroy();
      },
    };
  }
  const prepared = config.preparedStatements ?? true;
  const primary = openPostgres(config.url, 'primary', limits, observation, prepared);
  const reader = config.readUrl
    ? openPostgres(config.readUrl, 'reader', limits, observation, prepared)
    : primary;
  const writer = openPostgres(config.url, 'writer', limits, observation, prepared);
  return {
    primary,
    reader,
    writer,
    dialect: 'postgres',
    close: async () => {
      await writer.destroy();
      await primary.destroy();
      if (reader !== primary) await reader.destroy();
    },
  };
}
