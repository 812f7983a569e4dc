import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/** How often the WAL is looked at: a commit then finds at most this much of it left to flush. */
const INTERVAL_MS = 25;

/**
 * The worker's code, plain CommonJS (a worker made from code runs it as a script): its own
 * connection to the database file, and every `intervalMs` a look at the WAL. When the WAL changed
 * since the last look, it flushes what has been written to it so far to disk, and copies committed
 * frames into the database file (a PASSIVE checkpoint, which never waits for or blocks the writer).
 */
const WORKER_CODE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const Database = require(workerData.driver);
const { file, intervalMs } = workerData;
const wal = file + '-wal';
const db = new Database(file);
db.pragma('busy_timeout = 0');
let seen = '';
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
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch (error) {
    parentPort.postMessage({ error: String(error && error.message) });
  }
}
const timer = setInterval(look, intervalMs);
parentPort.on('message', () => {
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

/**
 * Keeps the work of a large SQLite commit off the event loop (D20). SQLite's driver is synchronous:
 * by default the connection that commits also copies the WAL into the database file once the WAL
 * passes a thousand pages (a checkpoint), and flushes every frame the transaction wrote at commit.
 * For a publish of 100,000 Resources that was a third of a second during which no other request was
 * answered. With the writer's own checkpoints turned off (`wal_autocheckpoint = 0`), this thread
 * checkpoints instead, and flushes the WAL while the transaction is still writing, so that the
 * commit finds little left to flush. Durability is SQLite's as before: the commit still syncs.
 */
export class SqliteCheckpointer {
  private readonly worker: Worker;
  private readonly exited: Promise<void>;
  private hasExited = false;
  private stopping = false;
  private stopped: Promise<void> | undefined;

  /**
   * @param onFailure told once when the thread cannot do its work (it failed to start, or ended): the
   *   caller gives the checkpoints back to the writer, so that the WAL never grows without bound.
   * @param onError told of a checkpoint that failed; the next one is tried all the same.
   */
  constructor(
    file: string,
    driver: string,
    onFailure: (message: string) => void,
    onError: (message: string) => void = () => {},
  ) {
    const require = createRequire(import.meta.url);
    this.worker = new Worker(WORKER_CODE, {
      eval: true,
      workerData: { file, driver: require.resolve(driver), intervalMs: INTERVAL_MS },
    });
    let failure: string | undefined;
    this.worker.on('message', (message: { error?: string }) => {
      if (message.error !== undefined) onError(message.error);
    });
    this.worker.on('error', (error) => {
      failure ??= error.message;
    });
    this.exited = new Promise((resolve) => {
      this.worker.once('exit', (code) => {
        this.hasExited = true;
        if (!this.stopping) onFailure(failure ?? `the checkpoint thread ended (exit code ${code})`);
        resolve();
      });
    });
    // A command that is done exits without waiting for this thread.
    this.worker.unref();
  }

  /** Stops the thread and closes its connection; resolves once it has, or at once if it had ended. */
  stop(): Promise<void> {
    this.stopping = true;
    if (this.hasExited) return Promise.resolve();
    this.stopped ??= new Promise<void>((resolve) => {
      // Held until the thread has closed its connection, or the process could end first.
      this.worker.ref();
      // A thread that does not end by itself (a checkpoint stuck on a busy file) is ended.
      const deadline = setTimeout(() => void this.worker.terminate(), 2000);
      void this.exited.then(() => {
        clearTimeout(deadline);
        resolve();
      });
      this.worker.postMessage('stop');
    });
    return this.stopped;
  }
}
