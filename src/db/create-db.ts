import fs from 'node:fs';
import path from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { DatabaseConfig } from '../config.js';
import type { Database, Db } from './tables.js';

export interface Databases {
  /** Writes, and reads that must see them. */
  readonly primary: Db;
  /** Reads that tolerate replica lag; the primary when no replica is configured. */
  readonly reader: Db;
  readonly dialect: DatabaseConfig['kind'];
  close(): Promise<void>;
}

function openSqlite(file: string): Db {
  if (file !== ':memory:') fs.mkdirSync(path.dirname(file), { recursive: true });
  const connection = new SqliteDatabase(file);
  connection.pragma('journal_mode = WAL');
  // FULL: a committed import survives a power cut, not only a crash of the process.
  connection.pragma('synchronous = FULL');
  connection.pragma('foreign_keys = ON');
  connection.pragma('busy_timeout = 5000');
  return new Kysely<Database>({ dialect: new SqliteDialect({ database: connection }) });
}

function openPostgres(url: string): Db {
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    connectionTimeoutMillis: 5000,
    idleTimeoutMillis: 30_000,
    // A statement that outlives this is cancelled by the server, so that no request hangs on it.
    statement_timeout: 10_000,
  });
  // An idle client that loses its connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}

/** Opens the configured database (D13). */
export function createDatabases(config: DatabaseConfig): Databases {
  if (config.kind === 'sqlite') {
    const db = openSqlite(config.path);
    return { primary: db, reader: db, dialect: 'sqlite', close: () => db.destroy() };
  }
  const primary = openPostgres(config.url);
  const reader = config.readUrl ? openPostgres(config.readUrl) : primary;
  return {
    primary,
    reader,
    dialect: 'postgres',
    close: async () => {
      await primary.destroy();
      if (reader !== primary) await reader.destroy();
    },
  };
}
