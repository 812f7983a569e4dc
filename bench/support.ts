/**
 * What both benchmarks share: the built command line, processes pinned to a core, readiness, peak
 * memory, generated catalog trees, and wrk as the load generator.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { type PostgresServer, startPostgres } from '../test/helpers/servers.js';

export const ROOT = path.resolve(import.meta.dirname, '..', '..');
/** The built command line; BENCH_CLI names another build's (a baseline to measure against). */
export const CLI = process.env.BENCH_CLI ?? path.join(ROOT, 'dist', 'cli', 'main.js');

function onPath(command: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}

/** The server gets core 0 and the load generator core 1, when `taskset` is there and both cores are. */
export const PINNING = onPath('taskset') && os.availableParallelism() >= 2;

/** `command args…`, pinned to `core` when pinning is possible. */
export function pinned(core: number, command: string, args: readonly string[]): [string, string[]] {
  return PINNING ? ['taskset', ['-c', String(core), command, ...args]] : [command, [...args]];
}

export function requireWrk(): void {
  if (!onPath('wrk')) {
    throw new Error(
      'the benchmark loads the server with wrk, which is not installed (Debian: apt-get install -y wrk)',
    );
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** The flags `npm start` gives node (package.json), so that the benchmarks run the service as it ships. */
function startFlags(): string[] {
  const { scripts } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    scripts: { start: string };
  };
  const words = scripts.start.split(/\s+/);
  const node = words.indexOf('node');
  // The words between `node` and the script it runs.
  const script = words.findIndex((word, i) => i > node && !word.startsWith('--'));
  return words.slice(node + 1, script);
}
const START_FLAGS = startFlags();

/**
 * Starts the service as `npm start` does (`playbook serve`, node's flags included), on `port`, pinned to
 * core 0; `nodeFlags` are given to node beside them (a profiler).
 */
export function startService(
  port: number,
  env: NodeJS.ProcessEnv,
  nodeFlags: readonly string[] = [],
): ChildProcess {
  const [command, args] = pinned(0, process.execPath, [
    ...START_FLAGS,
    ...nodeFlags,
    CLI,
    'serve',
    '--port',
    String(port),
  ]);
  // The access log goes where a deployment's would: written in full, read by nobody here.
  return spawn(command, args, { env, stdio: ['ignore', 'ignore', 'inherit'] });
}

export async function waitForReady(url: string, child: ChildProcess): Promise<void> {
  for (let attempt = 0; attempt < 600; attempt++) {
    if (child.exitCode !== null) throw new Error(`the server exited with ${child.exitCode}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${url} did not answer within a minute`);
}

export async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

/**
 * Scrapes `url` every second from a process of its own on the load generator's core (the benchmark's
 * own thread is blocked while wrk runs), as Prometheus would. `stop` returns how many scrapes succeeded.
 */
export function startScraper(url: string): { stop(): Promise<number> } {
  const script = `
    let scrapes = 0;
    setInterval(() => fetch(${JSON.stringify(url)}).then((a) => a.text()).then(() => scrapes++, () => {}), 1000);
    process.on('SIGTERM', () => { process.stdout.write(String(scrapes)); process.exit(0); });`;
  const [command, args] = pinned(1, process.execPath, ['-e', script]);
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  return {
    stop: async () => {
      await stop(child);
      return Number(output);
    },
  };
}

/** The process's resident memory now (VmRSS), in MB. */
export function rssMb(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /VmRSS:\s+(\d+) kB/.exec(status);
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

/**
 * The resident memory of a process left idle for `seconds`, in MB: V8 gives back what start-up left
 * (its memory reducer runs once allocation stops), so RSS falls for some seconds after a service is
 * ready (by about 10 MB over 20 s on a 2-core machine).
 */
export async function idleRssMb(pid: number, seconds = 30): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  return rssMb(pid);
}

/** The process's peak resident memory so far (VmHWM), in MB. */
export function peakRssMb(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /VmHWM:\s+(\d+) kB/.exec(status);
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

/**
 * The CPU time a process has used so far, all of its threads, in milliseconds (`/proc/PID/stat`'s
 * utime and stime, which Linux counts in hundredths of a second whatever the kernel's own tick).
 */
export function cpuMs(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command's name, in parentheses, may hold spaces: the fields are counted after its end.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Runs a command line of the service to its end and returns its stdout; stderr goes to ours. */
export function cli(args: readonly string[], env: NodeJS.ProcessEnv): string {
  return execFileSync(process.execPath, [CLI, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 64 * 1024 * 1024,
  }).toString();
}

/** An API key with `playbook:read` (or the scopes given) for account `bench`, minted through the API as a user would. */
export async function createReadKey(
  base: string,
  env: NodeJS.ProcessEnv,
  scopes: readonly string[] = ['playbook:read'],
  accountId = 'bench',
  /** D32: what the key is limited to, as `POST /v3/identity/api-keys` takes it. */
  restrictions?: Record<string, unknown>,
): Promise<string> {
  const token = cli(['token', '--user', 'bench', '--account', accountId], env).trim();
  const created = await fetch(`${base}/v3/identity/api-keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'bench', accountId, scopes, ...(restrictions ? { restrictions } : {}) }),
  });
  if (created.status !== 201) throw new Error(`key creation answered ${created.status}`);
  return ((await created.json()) as { key: string }).key;
}

// ---------------------------------------------------------------------------------------------------
// Generated content.

const KINDS = ['document', 'topic', 'reference', 'workflow', 'policy'] as const;

/** A manifest of about 1 KB, shaped like a real runbook's. */
function manifestOf(index: number): Record<string, unknown> {
  return {
    owner: 'platform-team',
    order: index,
    reviewers: ['alice', 'bob', 'carol'],
    links: Array.from({ length: 4 }, (_, i) => ({
      rel: i === 0 ? 'source' : 'related',
      href: `https://git.example.com/playbooks/runbook-${index}/section-${i}`,
    })),
    steps: Array.from({ length: 4 }, (_, i) => ({
      id: `step-${i + 1}`,
      title: `Check the state of component ${i + 1} and record it`,
      timeoutSeconds: 60 * (i + 1),
    })),
  };
}

export interface TreeOptions {
  readonly resources: number;
  /** Catalog slug; the tree holds this one catalog. */
  readonly slug: string;
  /** Characters of content per resource. */
  readonly contentChars: number;
}

/**
 * Writes a tree of one catalog (D15 layout) and returns its folder. Resources are spread over five
 * kinds; each has a manifest of about 1 KB and `contentChars` of markdown.
 */
export function writeTree(dir: string, options: TreeOptions): string {
  const resources = path.join(dir, options.slug, 'resources');
  fs.mkdirSync(resources, { recursive: true });
  fs.writeFileSync(
    path.join(dir, options.slug, 'catalog.json'),
    JSON.stringify({
      name: 'Benchmark catalog',
      version: '1.0.0',
      facets: { capability: ['benchmarking'] },
    }),
  );
  const paragraph = 'A paragraph of playbook guidance, long enough to be realistic.\n\n';
  for (let i = 0; i < options.resources; i++) {
    const slug = `resource-${String(i).padStart(6, '0')}`;
    const body = paragraph.repeat(Math.max(1, Math.ceil(options.contentChars / paragraph.length)));
    fs.writeFileSync(
      path.join(resources, `${slug}.json`),
      JSON.stringify({
        kind: KINDS[i % KINDS.length],
        title: `Resource ${i}`,
        description: `How the platform team handles situation number ${i}.`,
        version: '1.0.0',
        mediaType: 'text/markdown',
        manifest: manifestOf(i),
        facets: { technology: ['node'], channel: ['stable'] },
        content: `# ${slug}\n\n${body}`.slice(0, options.contentChars),
      }),
    );
  }
  return dir;
}

// ---------------------------------------------------------------------------------------------------
// Load.

export interface LoadResult {
  readonly rps: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Answers whose status was neither 2xx nor 3xx, as wrk counts them. */
  readonly errors: number;
  /** Requests answered in the run. */
  readonly requests: number;
}

function milliseconds(text: string): number {
  const match = /^([\d.]+)(us|ms|s|m)$/.exec(text);
  if (!match) return Number.NaN;
  const value = Number(match[1]);
  const unit = match[2];
  return unit === 'us' ? value / 1000 : unit === 'ms' ? value : unit === 's' ? value * 1000 : value * 60_000;
}

/**
 * `wrk -t1 -c<connections> -d<seconds>s --latency` on core 1, with the given headers, against `url`.
 * A Lua script (optional) may rotate paths.
 */
export function wrk(
  url: string,
  options: {
    connections: number;
    seconds: number;
    headers?: Record<string, string>;
    script?: string;
  },
): LoadResult {
  const headerArgs = Object.entries(options.headers ?? {}).flatMap(([name, value]) => [
    '-H',
    `${name}: ${value}`,
  ]);
  const scriptArgs = options.script === undefined ? [] : ['-s', options.script];
  const [command, args] = pinned(1, 'wrk', [
    '-t1',
    `-c${options.connections}`,
    `-d${options.seconds}s`,
    '--latency',
    '--timeout',
    '5s',
    ...headerArgs,
    ...scriptArgs,
    url,
  ]);
  const output = execFileSync(command, args, { stdio: ['ignore', 'pipe', 'inherit'] }).toString();
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1]);
  const p50Ms = milliseconds(/\s50%\s+(\S+)/.exec(output)?.[1] ?? '');
  const p99Ms = milliseconds(/\s99%\s+(\S+)/.exec(output)?.[1] ?? '');
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(output)?.[1] ?? 0);
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output);
  const errors = non2xx + (socketErrors ? socketErrors.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0);
  const requests = Number(/(\d+) requests in /.exec(output)?.[1]);
  if (!Number.isFinite(rps) || !Number.isFinite(p99Ms) || !Number.isFinite(requests))
    throw new Error(`could not read wrk's output:\n${output}`);
  return { rps, p50Ms, p99Ms, errors, requests };
}

/**
 * A throwaway PostgreSQL cluster, as the test suite starts it, with a database `playbook` in it; the
 * URL of that database is what PLAYBOOK_DATABASE_URL takes.
 */
export async function startPostgresDatabase(): Promise<{ server: PostgresServer; url: string }> {
  const server = await startPostgres();
  const admin = new (await import('pg')).default.Client({ connectionString: server.adminUrl });
  await admin.connect();
  await admin.query('CREATE DATABASE playbook');
  await admin.end();
  return { server, url: server.urlFor('playbook') };
}
