/**
 * `npm run bench`: speed and memory of the real server, built as it ships.
 *
 * Imports a generated catalog through `playbook import`, starts `playbook serve` as its own process,
 * creates an API key through the API, then loads each read operation with autocannon over loopback
 * and reads the server's peak resident memory from /proc. Exits 1 when a target is missed.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const CLI = path.join(ROOT, 'dist', 'cli', 'main.js');
const RESOURCES = Number(process.env.BENCH_RESOURCES ?? 2000);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const CONNECTIONS = 16;

interface Target {
  readonly minRequestsPerSecond: number;
  readonly maxP99Ms: number;
}

/** Floors for a 2-core machine with the load generator on the same cores; measured, then halved. */
const TARGETS: Record<string, Target> = {
  'list catalogs': { minRequestsPerSecond: 1000, maxP99Ms: 100 },
  'list resources (100 per page)': { minRequestsPerSecond: 250, maxP99Ms: 250 },
  'list resources, kind filter, deep page': { minRequestsPerSecond: 250, maxP99Ms: 250 },
  'get resource (database-text)': { minRequestsPerSecond: 1000, maxP99Ms: 100 },
  'get resource (object-storage)': { minRequestsPerSecond: 500, maxP99Ms: 150 },
  'get version': { minRequestsPerSecond: 1000, maxP99Ms: 100 },
  'get version, 304 revalidation': { minRequestsPerSecond: 1500, maxP99Ms: 100 },
};
const MAX_PEAK_RSS_MB = 350;
const MAX_IMPORT_SECONDS = 60;

const KINDS = ['document', 'topic', 'reference', 'workflow', 'policy'] as const;

function writeTree(dir: string): void {
  const resources = path.join(dir, 'bench', 'resources');
  fs.mkdirSync(resources, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'bench', 'catalog.json'),
    JSON.stringify({ name: 'Benchmark catalog', version: '1.0.0', facets: { capability: ['benchmarking'] } }),
  );
  for (let i = 0; i < RESOURCES; i++) {
    const slug = `resource-${String(i).padStart(5, '0')}`;
    // Every 500th resource is large enough to live in object storage.
    const paragraphs = i % 500 === 0 ? 1200 : 20;
    const content = `# ${slug}\n\n${'A paragraph of playbook guidance, long enough to be realistic.\n\n'.repeat(paragraphs)}`;
    fs.writeFileSync(
      path.join(resources, `${slug}.json`),
      JSON.stringify({
        kind: KINDS[i % KINDS.length],
        title: `Resource ${i}`,
        version: '1.0.0',
        mediaType: 'text/markdown',
        manifest: { owner: 'platform', order: i },
        facets: { technology: ['node'] },
        content,
      }),
    );
  }
}

async function freePort(): Promise<number> {
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

async function waitForReady(base: string, server: ChildProcess): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (server.exitCode !== null) throw new Error(`server exited with ${server.exitCode}`);
    try {
      if ((await fetch(`${base}/readyz`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('server did not become ready');
}

function peakRssMb(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /VmHWM:\s+(\d+) kB/.exec(status);
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

interface Scenario {
  readonly name: string;
  readonly path: string;
  readonly headers?: Record<string, string>;
  readonly expectStatus: number;
}

async function load(base: string, key: string, scenario: Scenario) {
  let unexpected = 0;
  const result = await autocannon({
    url: `${base}${scenario.path}`,
    connections: CONNECTIONS,
    duration: DURATION_S,
    headers: { 'x-api-key': key, ...scenario.headers },
    setupClient: (client) => {
      client.on('response', (status: number) => {
        if (status !== scenario.expectStatus) unexpected++;
      });
    },
  });
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, unexpected };
}

async function main(): Promise<number> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-'));
  const env = {
    ...process.env,
    PLAYBOOK_DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    PLAYBOOK_RATE_LIMIT_MAX: '1000000000',
  };
  const tree = path.join(dataDir, 'tree');
  writeTree(tree);

  const started = performance.now();
  execFileSync(process.execPath, [CLI, 'import', tree, '--owner', 'svc'], {
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const importSeconds = (performance.now() - started) / 1000;

  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const server = spawn(process.execPath, [CLI, 'serve', '--port', String(port)], {
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let failures = 0;
  try {
    await waitForReady(base, server);
    const token = execFileSync(process.execPath, [CLI, 'token', '--user', 'bench', '--account', 'bench'], {
      env,
    })
      .toString()
      .trim();
    const created = await fetch(`${base}/v3/identity/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench', accountId: 'bench', scopes: ['playbook:read'] }),
    });
    if (created.status !== 201) throw new Error(`key creation answered ${created.status}`);
    const { key } = (await created.json()) as { key: string };
    const page = (await (
      await fetch(`${base}/v3/playbook/catalogs/svc/bench/resources?pageSize=2`, {
        headers: { 'x-api-key': key },
      })
    ).json()) as { data: { id: string; currentVersion: { id: string } }[] };
    const large = page.data[0]!;
    const small = page.data[1]!;
    const version = await fetch(
      `${base}/v3/playbook/resources/${small.id}/versions/${small.currentVersion.id}`,
      {
        headers: { 'x-api-key': key },
      },
    );
    const etag = version.headers.get('etag') ?? '';

    const scenarios: Scenario[] = [
      { name: 'list catalogs', path: '/v3/playbook/catalogs', expectStatus: 200 },
      {
        name: 'list resources (100 per page)',
        path: '/v3/playbook/catalogs/svc/bench/resources?pageSize=100',
        expectStatus: 200,
      },
      {
        name: 'list resources, kind filter, deep page',
        path: '/v3/playbook/catalogs/svc/bench/resources?kind=policy,workflow&pageSize=100&page=7',
        expectStatus: 200,
      },
      { name: 'get resource (database-text)', path: `/v3/playbook/resources/${small.id}`, expectStatus: 200 },
      {
        name: 'get resource (object-storage)',
        path: `/v3/playbook/resources/${large.id}`,
        expectStatus: 200,
      },
      {
        name: 'get version',
        path: `/v3/playbook/resources/${small.id}/versions/${small.currentVersion.id}`,
        expectStatus: 200,
      },
      {
        name: 'get version, 304 revalidation',
        path: `/v3/playbook/resources/${small.id}/versions/${small.currentVersion.id}`,
        headers: { 'if-none-match': etag },
        expectStatus: 304,
      },
    ];

    console.log(
      `import of ${RESOURCES} resources: ${importSeconds.toFixed(1)} s (target ≤ ${MAX_IMPORT_SECONDS} s)`,
    );
    if (importSeconds > MAX_IMPORT_SECONDS) failures++;
    console.log(
      `${'scenario'.padEnd(42)} ${'req/s'.padStart(8)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)}  verdict`,
    );
    for (const scenario of scenarios) {
      const result = await load(base, key, scenario);
      const target = TARGETS[scenario.name]!;
      const ok =
        result.rps >= target.minRequestsPerSecond && result.p99 <= target.maxP99Ms && result.unexpected === 0;
      if (!ok) failures++;
      console.log(
        `${scenario.name.padEnd(42)} ${result.rps.toFixed(0).padStart(8)} ${String(result.p50).padStart(7)} ${String(result.p99).padStart(7)}  ${
          ok
            ? 'ok'
            : `MISSED (≥ ${target.minRequestsPerSecond} req/s, p99 ≤ ${target.maxP99Ms} ms, unexpected statuses ${result.unexpected})`
        }`,
      );
    }
    const rss = peakRssMb(server.pid!);
    console.log(`server peak RSS: ${rss.toFixed(0)} MB (target ≤ ${MAX_PEAK_RSS_MB} MB)`);
    if (!(rss <= MAX_PEAK_RSS_MB)) failures++;
  } finally {
    server.kill('SIGTERM');
    await new Promise((resolve) => server.once('exit', resolve));
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  console.log(failures === 0 ? 'all targets met' : `${failures} target(s) missed`);
  return failures === 0 ? 0 : 1;
}

process.exitCode = await main();
