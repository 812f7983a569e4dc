import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { waitFor } from './wait.js';

/**
 * The real servers behind the `production` test project: a throwaway PostgreSQL 15 cluster, a
 * redis-server and an S3-protocol server, each on a free port of 127.0.0.1 and each gone when the run
 * ends. `setup` is the project's globalSetup; tests reach the servers through `inject('playbookServers')`
 * (see `backend.ts`). The functions that start one server are exported for tests that need a server of
 * their own, such as the PostgreSQL fault test, which stops and starts its cluster.
 */

export interface S3Endpoint {
  readonly endpoint: string;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}

export interface ProductionServers {
  readonly postgres: {
    /** A superuser connection to the `postgres` database, for creating one database per test backend. */
    readonly adminUrl: string;
    readonly port: number;
  };
  readonly redisUrl: string;
  readonly s3: S3Endpoint;
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** Set by the production project's globalSetup; undefined in the embedded project. */
    playbookServers: ProductionServers | undefined;
  }
}

const run = promisify(execFile);

export const PG_BIN = process.env.PLAYBOOK_TEST_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const START_TIMEOUT_MS = 30_000;
/** s3rver accepts its own fixed credentials and no others. */
const S3RVER_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } as const;
const S3_REGION = 'us-east-1';

// ---------------------------------------------------------------------------------------------------
// Preflight: every missing part named at once, with what installs it.

function onPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, command);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

const isRoot = process.getuid?.() === 0;

/** Lines naming what the production project needs and cannot find; empty when all is there. */
export function missingParts(): string[] {
  const missing: string[] = [];
  for (const program of ['initdb', 'pg_ctl', 'postgres']) {
    try {
      fs.accessSync(path.join(PG_BIN, program), fs.constants.X_OK);
    } catch {
      missing.push(
        `PostgreSQL 15: ${path.join(PG_BIN, program)} is missing ` +
          '(apt-get install -y postgresql-15, or set PLAYBOOK_TEST_PG_BIN to the directory of initdb)',
      );
      break;
    }
  }
  if (isRoot) {
    // initdb and postgres refuse to run as root, so the cluster runs as the `postgres` user.
    if (!onPath('runuser')) missing.push('runuser (package util-linux) is missing: needed to run PostgreSQL');
    try {
      execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
    } catch {
      missing.push('the `postgres` user is missing (the postgresql-15 package creates it)');
    }
  }
  if (!onPath('redis-server')) missing.push('redis-server is not on PATH (apt-get install -y redis-server)');
  // The operations guide's reverse proxy runs in front of two instances, with a certificate of its own.
  if (!onPath('nginx')) missing.push('nginx is not on PATH (apt-get install -y nginx)');
  if (!onPath('openssl')) missing.push('openssl is not on PATH (apt-get install -y openssl)');
  try {
    createRequire(import.meta.url).resolve('s3rver');
  } catch {
    missing.push('the s3rver package is missing from node_modules (npm ci)');
  }
  return missing;
}

// ---------------------------------------------------------------------------------------------------
// Small tools.

export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function tail(file: string, lines = 15): string {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Things to stop if the process ends without running its teardown (a crash, an interrupted run). */
const emergencyStops = new Set<() => void>();
let exitHookInstalled = false;
function onAbruptExit(stop: () => void): () => void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const action of emergencyStops) {
        try {
          action();
        } catch {
          // best effort while exiting
        }
      }
    });
  }
  emergencyStops.add(stop);
  return () => emergencyStops.delete(stop);
}

// ---------------------------------------------------------------------------------------------------
// PostgreSQL.

export interface PostgresServer {
  readonly port: number;
  /** Superuser connection to the `postgres` database. */
  readonly adminUrl: string;
  /** A connection URL for `database` on this cluster. */
  urlFor(database: string): string;
  /** `pg_ctl stop -m fast`: sessions are ended and new connections refused. */
  stop(): Promise<void>;
  /** Starts the stopped cluster again, on the same port. */
  start(): Promise<void>;
  /** Stops the cluster and deletes its files. */
  destroy(): Promise<void>;
}

/**
 * A throwaway cluster: `initdb` into a temporary directory owned by `postgres`, listening only on
 * 127.0.0.1, unix socket inside that directory, durability off (fsync, full-page writes) for speed.
 * Its default collation is a locale-aware order like the `en_US.UTF-8` most production clusters get
 * (ICU `en-US` with punctuation ignored at the first level, as glibc does; letters before case), so
 * that a query relying on byte order without saying so fails here rather than in production.
 */
export async function startPostgres(): Promise<PostgresServer> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-pg-'));
  // The postgres user must traverse into the directory that holds its cluster.
  fs.chmodSync(root, 0o755);
  const dataDir = path.join(root, 'data');
  const socketDir = path.join(root, 'socket');
  const logFile = path.join(root, 'postgres.log');
  fs.mkdirSync(socketDir);
  if (isRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    fs.chownSync(root, uid, gid);
    fs.chownSync(socketDir, uid, gid);
  }
  const asPostgres = (program: string, args: string[]) =>
    isRoot
      ? run('runuser', ['-u', 'postgres', '--', path.join(PG_BIN, program), ...args])
      : run(path.join(PG_BIN, program), args);
  const pgCtlSync = (args: string[]) =>
    isRoot
      ? execFileSync('runuser', ['-u', 'postgres', '--', path.join(PG_BIN, 'pg_ctl'), ...args], {
          stdio: 'ignore',
        })
      : execFileSync(path.join(PG_BIN, 'pg_ctl'), args, { stdio: 'ignore' });

  let running = false;
  let port = 0;
  const removeHook = onAbruptExit(() => {
    if (running) pgCtlSync(['-D', dataDir, '-m', 'immediate', 'stop']);
    fs.rmSync(root, { recursive: true, force: true });
  });

  try {
    await asPostgres('initdb', [
      '-D',
      dataDir,
      '-U',
      'postgres',
      '-A',
      'trust',
      '-E',
      'UTF8',
      '--locale=C.UTF-8',
      '--locale-provider=icu',
      '--icu-locale=en-US-u-ka-shifted',
      '--no-sync',
      '--no-instructions',
    ]);
  } catch (error) {
    removeHook();
    fs.rmSync(root, { recursive: true, force: true });
    throw new Error(`initdb failed: ${(error as { stderr?: string }).stderr ?? String(error)}`);
  }

  const start = async () => {
    const options = [
      '-c listen_addresses=127.0.0.1',
      `-c port=${port}`,
      `-c unix_socket_directories=${socketDir}`,
      '-c fsync=off',
      '-c synchronous_commit=off',
      '-c full_page_writes=off',
      '-c max_connections=300',
    ].join(' ');
    try {
      await asPostgres('pg_ctl', ['-D', dataDir, '-l', logFile, '-w', '-t', '30', '-o', options, 'start']);
      running = true;
    } catch (error) {
      // pg_ctl may give up waiting on a server that did start; leave nothing running.
      await asPostgres('pg_ctl', ['-D', dataDir, '-m', 'immediate', 'stop']).catch(() => {});
      throw new Error(`pg_ctl start failed on port ${port}:\n${tail(logFile)}`, { cause: error });
    }
  };

  // A free port can be taken between the probe and the bind; try a few.
  let lastError: unknown;
  for (let attempt = 0; attempt < 3 && !running; attempt++) {
    port = await freePort();
    try {
      await start();
    } catch (error) {
      lastError = error;
    }
  }
  if (!running) {
    removeHook();
    fs.rmSync(root, { recursive: true, force: true });
    throw lastError;
  }

  const urlFor = (database: string) => `postgres://postgres@127.0.0.1:${port}/${database}`;
  return {
    port,
    adminUrl: urlFor('postgres'),
    urlFor,
    stop: async () => {
      await asPostgres('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', '-t', '30', 'stop']);
      running = false;
    },
    start,
    destroy: async () => {
      try {
        if (running) await asPostgres('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', '-t', '30', 'stop']);
        running = false;
      } finally {
        removeHook();
        fs.rmSync(root, { recursive: true, force: true });
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Redis.

/**
 * A cluster of a test's own (one it may stop and start without disturbing other suites) with an empty
 * database `playbook` in it.
 */
export async function startPostgresWithDatabase(): Promise<{ server: PostgresServer; url: string }> {
  const server = await startPostgres();
  const { default: pg } = await import('pg');
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  try {
    await admin.query('CREATE DATABASE playbook');
  } finally {
    await admin.end();
  }
  return { server, url: server.urlFor('playbook') };
}

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  /** Kills the server (SIGKILL, as a crash would): every connection drops, and its data is gone. */
  stop(): Promise<void>;
  /** Starts a fresh server on the same port. */
  start(): Promise<void>;
  destroy(): Promise<void>;
}

async function redisAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let answer = '';
    socket.setTimeout(1000, () => socket.destroy());
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      answer += chunk.toString();
      if (answer.includes('\r\n')) socket.end();
    });
    socket.on('close', () => resolve(answer.startsWith('+PONG')));
    socket.on('error', () => resolve(false));
  });
}

/** A redis-server with no persistence, bound to 127.0.0.1, a child of this process. */
export async function startRedis(): Promise<RedisServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-redis-'));
  let port = 0;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  const removeHook = onAbruptExit(() => {
    child?.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const halt = async (signal: NodeJS.Signals) => {
    if (running()) child?.kill(signal);
    await exited;
  };
  const start = async () => {
    if (running()) return;
    const output: string[] = [];
    const launched = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = launched;
    launched.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    launched.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    exited = new Promise<void>((resolve) => launched.once('exit', () => resolve()));
    let spawnError: Error | undefined;
    launched.once('error', (error) => {
      spawnError = error;
    });
    try {
      await waitFor(
        'redis-server answering',
        async () => {
          if (spawnError) throw spawnError;
          if (launched.exitCode !== null) throw new Error(`redis-server exited:\n${output.join('')}`);
          return redisAnswers(port);
        },
        START_TIMEOUT_MS,
      );
    } catch (error) {
      await halt('SIGKILL');
      throw error;
    }
  };
  const destroy = async () => {
    await halt('SIGTERM');
    removeHook();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  // A free port can be taken between the probe and the bind; try a few.
  let lastError: unknown;
  for (let attempt = 0; attempt < 3 && !running(); attempt++) {
    port = await freePort();
    try {
      await start();
    } catch (error) {
      lastError = error;
    }
  }
  if (!running()) {
    await destroy();
    throw lastError;
  }
  return { url: `redis://127.0.0.1:${port}`, port, stop: () => halt('SIGKILL'), start, destroy };
}

// ---------------------------------------------------------------------------------------------------
// S3.

interface S3rverOptions {
  address: string;
  port: number;
  directory: string;
  silent: boolean;
}
interface S3rverInstance {
  run(): Promise<AddressInfo>;
  close(): Promise<void>;
  httpServer?: { closeAllConnections(): void };
}
type S3rverConstructor = new (options: S3rverOptions) => S3rverInstance;

export interface S3Server extends S3Endpoint {
  readonly port: number;
  /** Stops answering: every open connection is cut. */
  stop(): Promise<void>;
  /** Serves again on the same port, with the objects it had. */
  start(): Promise<void>;
  destroy(): Promise<void>;
}

/** s3rver (npm) on 127.0.0.1, keeping its buckets in a temporary directory. */
export async function startS3(): Promise<S3Server> {
  // s3rver is CommonJS without type declarations; the shape used here is declared above.
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverConstructor;
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-s3-'));
  const removeHook = onAbruptExit(() => fs.rmSync(directory, { recursive: true, force: true }));
  let server: S3rverInstance | undefined;
  let port = 0;
  const start = async () => {
    if (server) return;
    // s3rver reports a failed bind only as an 'error' event nobody listens to, and its promise never
    // settles; a port that is taken is therefore found out first, and the start is given a deadline.
    await new Promise<void>((resolve, reject) => {
      const probe = net.createServer();
      probe.once('error', reject);
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve()));
    });
    const instance = new S3rver({ address: '127.0.0.1', port, directory, silent: true });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      instance.run(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`s3rver did not listen on port ${port}`)), 10_000);
      }),
    ]).finally(() => clearTimeout(timer));
    server = instance;
  };
  const stop = async () => {
    const instance = server;
    server = undefined;
    if (!instance) return;
    instance.httpServer?.closeAllConnections();
    await instance.close();
  };
  let lastError: unknown;
  for (let attempt = 0; attempt < 3 && !server; attempt++) {
    port = await freePort();
    try {
      await start();
    } catch (error) {
      lastError = error;
    }
  }
  if (!server) {
    removeHook();
    fs.rmSync(directory, { recursive: true, force: true });
    throw new Error(`s3rver did not start: ${String(lastError)}`, { cause: lastError });
  }
  return {
    port,
    endpoint: `http://127.0.0.1:${port}`,
    region: S3_REGION,
    ...S3RVER_CREDENTIALS,
    stop,
    start,
    destroy: async () => {
      try {
        await stop();
      } finally {
        removeHook();
        fs.rmSync(directory, { recursive: true, force: true });
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// The production project's globalSetup.

/** Starts the three servers, provides their addresses, and returns the teardown that stops them. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const missing = missingParts();
  if (missing.length > 0) {
    const ci = process.env.CI === 'true' ? ' (CI)' : '';
    throw new Error(
      [
        `The production test project${ci} runs against real PostgreSQL, Redis and S3 servers, and cannot start them:`,
        ...missing.map((line) => `  - ${line}`),
        'On Debian, .ci/run installs them. To run only the SQLite suite meanwhile: npx vitest run --project embedded',
      ].join('\n'),
    );
  }
  // The SDK's notice about future Node versions says nothing about the code under test.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

  const stops: (() => Promise<void>)[] = [];
  const teardown = async () => {
    const failures: unknown[] = [];
    for (const stop of stops.reverse()) {
      try {
        await stop();
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0) throw new AggregateError(failures, 'stopping the test servers failed');
  };
  // Started side by side; every start is awaited, so that a failure of one leaves nothing running.
  const [postgres, redis, s3] = await Promise.allSettled([startPostgres(), startRedis(), startS3()]);
  for (const started of [postgres, redis, s3]) {
    if (started.status === 'fulfilled') stops.push(started.value.destroy);
  }
  if (postgres.status === 'rejected' || redis.status === 'rejected' || s3.status === 'rejected') {
    await teardown().catch(() => {});
    const reasons = [postgres, redis, s3]
      .filter((started) => started.status === 'rejected')
      .map((started) => `  - ${String((started as PromiseRejectedResult).reason)}`);
    throw new Error(`The production test project could not start its servers:\n${reasons.join('\n')}`);
  }
  project.provide('playbookServers', {
    postgres: { adminUrl: postgres.value.adminUrl, port: postgres.value.port },
    redisUrl: redis.value.url,
    s3: {
      endpoint: s3.value.endpoint,
      region: s3.value.region,
      accessKeyId: s3.value.accessKeyId,
      secretAccessKey: s3.value.secretAccessKey,
    },
  });
  return teardown;
}

/** A name unique to this run, for databases and buckets. */
export function uniqueName(prefix: string): string {
  return `${prefix}${randomBytes(6).toString('hex')}`;
}
