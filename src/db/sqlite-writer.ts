import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type SqliteDatabase from 'better-sqlite3';
import {
  CompiledQuery,
  createQueryId,
  type DatabaseConnection,
  type DatabaseIntrospector,
  type Dialect,
  type Driver,
  IdentifierNode,
  type Kysely,
  type QueryCompiler,
  type QueryResult,
  RawNode,
  SelectQueryNode,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
} from 'kysely';

/** How often the WAL is looked at: a commit then finds at most this much of it left to flush. */
const CHECKPOINT_INTERVAL_MS = 25;

/** How long a closing thread may take to finish its statement and close, before it is ended. */
const CLOSE_DEADLINE_MS = 5000;

/**
 * A thread's code, plain CommonJS (a worker made from code runs it as a script). It owns one
 * connection (the writer's) and runs each statement sent to it, one at a
 * time, answering with its rows or its changes, or with the error's name, message and code.
 *
 * The writer's thread also makes the checkpoints (`checkpoints`), on a connection of its own: every
 * `intervalMs`, when the WAL changed since the last look, it flushes what has been written to it so
 * far to disk, and copies committed frames into the database file (a PASSIVE checkpoint, which never
 * waits for or blocks the writer).
 * The writer's own checkpoints are off (`wal_autocheckpoint = 0`), and its commit finds little of a
 * long transaction left to flush. Should the checkpoint connection not open, the writer checkpoints
 * again, as SQLite does by default: slower commits, a bounded WAL.
 */
const WORKER_CODE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const Database = require(workerData.driver);
const { LRUCache } = require(workerData.lruCache);
const { file, pragmas, checkpoints, intervalMs } = workerData;

function described(error) {
  return {
    name: error && error.name,
    message: String(error && error.message),
    code: error && typeof error.code === 'string' ? error.code : undefined,
  };
}

function open() {
  let db;
  try {
    db = new Database(file);
    for (const pragma of pragmas) db.pragma(pragma);
    if (checkpoints) db.pragma('wal_autocheckpoint = 0');
    return db;
  } catch (error) {
    parentPort.postMessage({ failed: described(error) });
    if (db) db.close();
    parentPort.close();
  }
}
const db = open();

// Prepared once by SQL text; one that is busy (an iteration still running over it) is never handed out twice.
const statements = new LRUCache({ max: workerData.statements });
function prepare(sql) {
  const held = statements.get(sql);
  if (held && !held.busy) return held;
  const statement = db.prepare(sql);
  statements.set(sql, statement);
  return statement;
}
function holdsBytes(rows) {
  for (const row of rows) for (const key in row) if (row[key] instanceof Uint8Array) return true;
  return false;
}
function run(sql, parameters) {
  const statement = prepare(sql);
  if (statement.reader) {
    const rows = statement.all(parameters);
    return { rows, bytes: holdsBytes(rows) };
  }
  const { changes, lastInsertRowid } = statement.run(parameters);
  return { changes, lastInsertRowid };
}

let checkpointer;
let timer;
let seen = '';
const wal = (workerData.checkpointFile || file) + '-wal';
function look() {
  let stat;
  try {
    stat = fs.statSync(wal);
  } catch {
    return;
  }
  const now = stat.size + ':' + stat.mtimeMs;
  if (now === seen) return;
  seen = now;
  // Each step on its own: a filesystem that refuses the flush still gets its checkpoints.
  try {
    const fd = fs.openSync(wal, 'r');
    try {
      fs.fdatasyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {}
  // A checkpoint that fails is tried again at the next look.
  try {
    checkpointer.pragma('wal_checkpoint(PASSIVE)');
  } catch {}
}
if (db && checkpoints) {
  try {
    checkpointer = new Database(workerData.checkpointFile || file);
    checkpointer.pragma('busy_timeout = 0');
    timer = setInterval(look, intervalMs);
  } catch (error) {
    db.pragma('wal_autocheckpoint = 1000');
    parentPort.postMessage({ warning: 'SQLite checkpoints are back on the writer: ' + String(error && error.message) });
  }
}

if (db) parentPort.postMessage({ opened: true });
if (db) parentPort.on('message', (message) => {
  if (message.close) {
    clearInterval(timer);
    if (checkpointer) checkpointer.close();
    db.close();
    parentPort.close();
    return;
  }
  let answer;
  try {
    answer = run(message.sql, message.parameters);
  } catch (error) {
    answer = { error: described(error) };
  }
  parentPort.postMessage(answer);
});
`;

export interface SqliteWriterOptions {
  readonly file: string;
  /** The package name of the SQLite driver, the one the main thread loads (`sqliteDriverName`). */
  readonly driver: string;
  /** Set on the connection as it opens, in order (`journal_mode = WAL`, …). */
  readonly pragmas: readonly string[];
  /** Whether the thread makes the checkpoints (a file's database; an in-memory one has no WAL). */
  readonly checkpoints: boolean;
  /** Distinct statements kept prepared. */
  readonly statements: number;
  /** Where the checkpoints' connection opens, when not `file`: a test's way of making it fail. */
  readonly checkpointFile?: string;
  /** Told of what the operator should know and the writer works on regardless. */
  readonly onWarning: (message: string) => void;
  /** Told once for each thread that ends without being closed: every statement on it since has failed. */
  readonly onFailure: (error: Error) => void;
}

/**
 * Kysely's SQLite dialect, with the connection on a thread of its own (D20). better-sqlite3 is
 * synchronous: on the event loop's thread, the writer's statements and above all its commits (a
 * publish of 100,000 Resources ends with one of 650-680 ms: SQLite rewrites the WAL frames' checksums,
 * then flushes) held every other request. Here each compiled query goes to the thread and its answer
 * comes back as Kysely's own SQLite driver gives it; transactions are statements on that connection.
 */
export class SqliteWriterDialect implements Dialect {
  constructor(private readonly options: SqliteWriterOptions) {}

  createAdapter() {
    return new SqliteAdapter();
  }

  createDriver(): Driver {
    return new SqliteWriterDriver(this.options);
  }

  createQueryCompiler(): QueryCompiler {
    return new SqliteQueryCompiler();
  }

  // biome-ignore lint/suspicious/noExplicitAny: Kysely's own dialects take any database.
  createIntrospector(db: Kysely<any>): DatabaseIntrospector {
    return new SqliteIntrospector(db);
  }
}

class SqliteWriterDriver implements Driver {
  private thread: WriterThread | undefined;
  /**
   * A SQLite connection serves one caller at a time, as in Kysely's SQLite driver: each is lent to one,
   * and the others wait for the first to be given back, in the order they asked.
   */
  private readonly free: WriterConnection[] = [];
  private readonly waiting: ((connection: WriterConnection) => void)[] = [];
  /** Told each time a connection is given back (`destroy` waits for all of them). */
  private readonly released: (() => void)[] = [];

  constructor(private readonly options: SqliteWriterOptions) {}

  async init(): Promise<void> {
    this.thread = await WriterThread.start(this.options);
    this.free.push(new WriterConnection(this.thread));
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    // Kysely calls init before it acquires.
    return this.free.pop() ?? new Promise((resolve) => this.waiting.push(resolve));
  }

  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    const next = this.waiting.shift();
    if (next) next(connection as WriterConnection);
    else this.free.push(connection as WriterConnection);
    for (const told of this.released.splice(0)) told();
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin'));
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('commit'));
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('rollback'));
  }

  async savepoint(connection: DatabaseConnection, name: string, compile: CompileQuery): Promise<void> {
    await connection.executeQuery(compile(savepointCommand('savepoint', name), createQueryId()));
  }

  async rollbackToSavepoint(
    connection: DatabaseConnection,
    name: string,
    compile: CompileQuery,
  ): Promise<void> {
    await connection.executeQuery(compile(savepointCommand('rollback to', name), createQueryId()));
  }

  async releaseSavepoint(connection: DatabaseConnection, name: string, compile: CompileQuery): Promise<void> {
    await connection.executeQuery(compile(savepointCommand('release', name), createQueryId()));
  }

  /** Waits for the connections' holders (a transaction in progress) to be done, as a pool's end does. */
  async destroy(): Promise<void> {
    if (!this.thread) return;
    while (this.free.length < 1) {
      await new Promise<void>((resolve) => this.released.push(resolve));
    }
    await this.thread.close();
  }
}

type CompileQuery = Parameters<NonNullable<Driver['savepoint']>>[2];

function savepointCommand(command: string, name: string): RawNode {
  return RawNode.createWithChildren([RawNode.createWithSql(`${command} `), IdentifierNode.create(name)]);
}

class WriterConnection implements DatabaseConnection {
  constructor(private readonly thread: WriterThread) {}

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    const answer = await this.thread.run(compiledQuery.sql, compiledQuery.parameters);
    if ('rows' in answer) return { rows: (answer.bytes ? answer.rows.map(withBuffers) : answer.rows) as R[] };
    const { changes, lastInsertRowid } = answer;
    return {
      numAffectedRows: changes !== undefined && changes !== null ? BigInt(changes) : undefined,
      insertId:
        lastInsertRowid !== undefined && lastInsertRowid !== null ? BigInt(lastInsertRowid) : undefined,
      rows: [],
    };
  }

  /** Nothing streams from the writer: a select's rows come whole, then are handed out one by one. */
  async *streamQuery<R>(compiledQuery: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    if (!SelectQueryNode.is(compiledQuery.query)) throw new Error('only a select query streams on SQLite');
    const { rows } = await this.executeQuery<R>(compiledQuery);
    for (const row of rows) yield { rows: [row] };
  }
}

/** What the thread answers a statement with. */
type Answer =
  | { readonly rows: Record<string, unknown>[]; readonly bytes: boolean }
  | { readonly changes: number | bigint; readonly lastInsertRowid: number | bigint };

interface Described {
  readonly name?: string;
  readonly message: string;
  readonly code?: string;
}

type Message =
  | Answer
  | { readonly error: Described }
  | { readonly failed: Described }
  | { readonly warning: string }
  | { readonly opened: true };

/** The thread and its one statement in flight. */
class WriterThread {
  private pending: { resolve(answer: Answer): void; reject(error: Error): void } | undefined;
  private failure: Error | undefined;
  private closing: Promise<void> | undefined;
  private readonly exited: Promise<void>;

  private constructor(
    private readonly worker: Worker,
    options: SqliteWriterOptions,
    opened: (error?: Error) => void,
  ) {
    let thrown: Error | undefined;
    let isOpen = false;
    worker.on('message', (message: Message) => {
      if ('opened' in message) {
        isOpen = true;
        this.idle();
        opened();
      } else if ('failed' in message) {
        opened(rebuilt(message.failed, options.driver));
      } else if ('warning' in message) {
        options.onWarning(message.warning);
      } else {
        const pending = this.pending;
        this.pending = undefined;
        this.idle();
        if ('error' in message) pending?.reject(rebuilt(message.error, options.driver));
        else pending?.resolve(message);
      }
    });
    worker.on('messageerror', (error) => this.pending?.reject(error));
    worker.on('error', (error) => {
      thrown ??= error;
    });
    this.exited = new Promise((resolve) => {
      worker.once('exit', (code) => {
        const why = thrown?.message ?? `exit code ${code}`;
        this.failure ??= new Error(`the SQLite writer's thread ended: ${why}`, { cause: thrown });
        this.pending?.reject(this.failure);
        this.pending = undefined;
        if (!isOpen) opened(thrown ?? this.failure);
        else if (!this.closing) options.onFailure(this.failure);
        resolve();
      });
    });
  }

  /** Starts the thread; resolves once its connection is open, rejects with the error if it cannot open. */
  static start(options: SqliteWriterOptions): Promise<WriterThread> {
    const require = createRequire(import.meta.url);
    const { onWarning: _w, onFailure: _f, ...data } = options;
    const worker = new Worker(WORKER_CODE, {
      eval: true,
      workerData: {
        ...data,
        driver: require.resolve(options.driver),
        lruCache: require.resolve('lru-cache'),
        intervalMs: CHECKPOINT_INTERVAL_MS,
      },
    });
    return new Promise((resolve, reject) => {
      const thread: WriterThread = new WriterThread(worker, options, (error) =>
        error ? reject(error) : resolve(thread),
      );
    });
  }

  run(sql: string, parameters: readonly unknown[]): Promise<Answer> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new Error(`the SQLite writer's connection is closed`));
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      // Held while a statement is in flight: a command awaiting its answer must not end first.
      this.worker.ref();
      try {
        this.worker.postMessage({ sql, parameters: parameters.map(sendable) });
      } catch (error) {
        this.pending = undefined;
        this.idle();
        reject(error);
      }
    });
  }

  /** Closes the connection once the statement in flight (if any) is done, and ends the thread. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.failure) return;
      this.worker.ref();
      // A thread that does not end by itself (a statement stuck on a busy file) is ended.
      const deadline = setTimeout(() => void this.worker.terminate(), CLOSE_DEADLINE_MS);
      this.worker.postMessage({ close: true });
      await this.exited;
      clearTimeout(deadline);
    })();
    return this.closing;
  }

  /** An idle thread does not keep the process alive: a command that is done exits without it. */
  private idle(): void {
    this.worker.unref();
  }
}

/**
 * A parameter as it crosses to the thread. A Buffer is mostly a view of a shared 8 KiB slab, which the
 * structured clone would copy whole: a view of part of its memory is sent as a copy of that part.
 */
function sendable(value: unknown): unknown {
  if (value instanceof Uint8Array && value.byteLength !== value.buffer.byteLength)
    return new Uint8Array(value);
  return value;
}

/** The structured clone makes a Buffer a Uint8Array; a blob is read back as a Buffer, as better-sqlite3 gives it. */
function withBuffers(row: Record<string, unknown>): Record<string, unknown> {
  for (const key in row) {
    const value = row[key];
    if (value instanceof Uint8Array && !Buffer.isBuffer(value))
      row[key] = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }
  return row;
}

/** The error the thread described, as better-sqlite3 threw it: a SqliteError keeps its class and code. */
function rebuilt(described: Described, driver: string): Error {
  const { SqliteError } = createRequire(import.meta.url)(driver) as typeof SqliteDatabase;
  if (described.name === 'SqliteError' && described.code !== undefined)
    return new SqliteError(described.message, described.code);
  const error = new Error(described.message);
  if (described.name) error.name = described.name;
  if (described.code !== undefined) Object.assign(error, { code: described.code });
  return error;
}
