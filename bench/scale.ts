/**
 * `npm run bench:scale`: the service with 100,000 resources in one catalog, on SQLite and on
 * PostgreSQL (a throwaway cluster, as the test suite starts it).
 *
 * - Import: wall time and the importing process's peak RSS.
 * - Deep pages: page 1, the middle page and the last page of 100, each read from storage (the
 *   service runs with no answer cache for this), median of repeated reads; the last page may cost at
 *   most twice the first.
 * - The catalogs list, whose one catalog pins all 100,000 resources: the first read, then a read from
 *   memory, then compressed.
 * - The service's peak RSS while wrk loads it with a mix of pages and details.
 *
 * Exits 1 when a target is missed. BENCH_SCALE_RESOURCES changes the size; BENCH_SCALE_STACKS
 * (`sqlite,postgres`) which stacks run.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { PostgresServer } from '../test/helpers/servers.js';
import {
  CLI,
  createReadKey,
  freePort,
  peakRssMb,
  requireWrk,
  startPostgresDatabase,
  startService,
  stop,
  waitForReady,
  writeTree,
  wrk,
} from './support.js';

const RESOURCES = Number(process.env.BENCH_SCALE_RESOURCES ?? 100_000);
const STACKS = (process.env.BENCH_SCALE_STACKS ?? 'sqlite,postgres').split(',');
const PAGE_SIZE = 100;
const READS_PER_PAGE = 15;

const TARGETS = {
  importSeconds: 60,
  importPeakRssMb: 300,
  lastPageOverFirst: 2,
  servePeakRssMb: 200,
};

interface Timed {
  readonly status: number;
  readonly ms: number;
  readonly bytes: number;
  readonly encoding: string | undefined;
}

function timedGet(url: string, headers: Record<string, string>): Promise<Timed> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers }, (response) => {
        let bytes = 0;
        response.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
        });
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            ms: performance.now() - started,
            bytes,
            encoding: response.headers['content-encoding'],
          }),
        );
        response.on('error', reject);
      })
      .on('error', reject);
  });
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** Runs `args` of the CLI to its end, sampling its peak RSS; returns seconds and MB. */
async function measuredCli(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ seconds: number; peakMb: number }> {
  const started = performance.now();
  const child: ChildProcess = spawn(process.execPath, [CLI, ...args], {
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let peakMb = 0;
  const sampler = setInterval(() => {
    try {
      // A process that has just exited has no VmHWM left to read (NaN).
      const sample = peakRssMb(child.pid!);
      if (Number.isFinite(sample)) peakMb = Math.max(peakMb, sample);
    } catch {
      // exited between two samples
    }
  }, 25);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearInterval(sampler);
  if (code !== 0) throw new Error(`playbook ${args[0]} exited with ${code}`);
  return { seconds: (performance.now() - started) / 1000, peakMb };
}

interface Verdicts {
  failures: number;
  check(ok: boolean, line: string): void;
}

function verdicts(): Verdicts {
  return {
    failures: 0,
    check(ok, line) {
      if (!ok) this.failures++;
      console.log(`  ${line}  ${ok ? 'ok' : 'MISSED'}`);
    },
  };
}

async function measureStack(stack: string, tree: string, results: Verdicts): Promise<void> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `playbook-scale-${stack}-`));
  let postgres: PostgresServer | undefined;
  const started: ChildProcess[] = [];
  try {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PLAYBOOK_DATA_DIR: dataDir,
      PLAYBOOK_RATE_LIMIT_MAX: '1000000000',
    };
    delete env.LOG_LEVEL;
    if (stack === 'postgres') {
      const started = await startPostgresDatabase();
      postgres = started.server;
      env.PLAYBOOK_DATABASE_URL = started.url;
    }
    console.log(`${stack}:`);
    const imported = await measuredCli(['import', tree, '--owner', 'svc'], env);
    results.check(
      imported.seconds <= TARGETS.importSeconds && imported.peakMb <= TARGETS.importPeakRssMb,
      `import of ${RESOURCES} resources: ${imported.seconds.toFixed(1)} s, peak RSS ${imported.peakMb.toFixed(0)} MB ` +
        `(targets ≤ ${TARGETS.importSeconds} s, ≤ ${TARGETS.importPeakRssMb} MB)`,
    );

    // Pages read from storage every time: the service keeps no answers.
    const uncachedPort = await freePort();
    const uncached = startService(uncachedPort, { ...env, PLAYBOOK_ANSWER_CACHE_BYTES: '0' });
    started.push(uncached);
    const base = `http://127.0.0.1:${uncachedPort}`;
    await waitForReady(`${base}/readyz`, uncached);
    const key = await createReadKey(base, env);
    const headers = { 'x-api-key': key };
    const pages = Math.ceil(RESOURCES / PAGE_SIZE);
    const pageMs: Record<string, number> = {};
    for (const [name, page] of [
      ['first', 1],
      ['middle', Math.ceil(pages / 2)],
      ['last', pages],
    ] as const) {
      const url = `${base}/v3/playbook/catalogs/svc/bench/resources?pageSize=${PAGE_SIZE}&page=${page}`;
      await timedGet(url, headers);
      const times: number[] = [];
      for (let i = 0; i < READS_PER_PAGE; i++) {
        const answer = await timedGet(url, headers);
        if (answer.status !== 200) throw new Error(`page ${page} answered ${answer.status}`);
        times.push(answer.ms);
      }
      pageMs[name] = median(times);
    }
    const ratio = pageMs.last! / pageMs.first!;
    results.check(
      ratio <= TARGETS.lastPageOverFirst,
      `pages of ${PAGE_SIZE}, from storage: first ${pageMs.first!.toFixed(1)} ms, middle ${pageMs.middle!.toFixed(1)} ms, ` +
        `last ${pageMs.last!.toFixed(1)} ms (last/first ${ratio.toFixed(2)}, target ≤ ${TARGETS.lastPageOverFirst})`,
    );
    await stop(uncached);

    // The service as it ships.
    const port = await freePort();
    const service = startService(port, env);
    started.push(service);
    const shipped = `http://127.0.0.1:${port}`;
    await waitForReady(`${shipped}/readyz`, service);
    const catalogs = `${shipped}/v3/playbook/catalogs`;
    const cold = await timedGet(catalogs, headers);
    const warm = await timedGet(catalogs, headers);
    const firstBr = await timedGet(catalogs, { ...headers, 'accept-encoding': 'br' });
    const warmBr = await timedGet(catalogs, { ...headers, 'accept-encoding': 'br' });
    results.check(
      warm.ms < cold.ms / 5 && warmBr.encoding === 'br' && warmBr.ms < firstBr.ms,
      `catalogs list, ${(cold.bytes / 1e6).toFixed(1)} MB: first ${cold.ms.toFixed(0)} ms, from memory ` +
        `${warm.ms.toFixed(1)} ms; br ${(warmBr.bytes / 1e6).toFixed(2)} MB: first ${firstBr.ms.toFixed(0)} ms, ` +
        `then ${warmBr.ms.toFixed(1)} ms`,
    );

    const afterList = peakRssMb(service.pid!);
    console.log(`  peak RSS once the list is held and compressed: ${afterList.toFixed(0)} MB (no target)`);

    // Peak RSS under a mixed load of pages all over the catalog and details, in a fresh service: the
    // catalogs list alone is tens of megabytes at this size, so it is measured above on its own.
    await stop(service);
    const loadedPort = await freePort();
    const loaded = startService(loadedPort, env);
    started.push(loaded);
    const loadedBase = `http://127.0.0.1:${loadedPort}`;
    await waitForReady(`${loadedBase}/readyz`, loaded);
    const list = JSON.parse(
      await new Promise<string>((resolve, reject) => {
        http
          .get(
            `${loadedBase}/v3/playbook/catalogs/svc/bench/resources?pageSize=100&page=7`,
            { headers },
            (response) => {
              let text = '';
              response.on('data', (chunk: Buffer) => {
                text += chunk.toString();
              });
              response.on('end', () => resolve(text));
            },
          )
          .on('error', reject);
      }),
    ) as { data: { id: string }[] };
    const paths = [
      ...list.data.slice(0, 50).map((resource) => `/v3/playbook/resources/${resource.id}`),
      ...Array.from(
        { length: 200 },
        (_, i) => `/v3/playbook/catalogs/svc/bench/resources?pageSize=100&page=${1 + ((i * 37) % pages)}`,
      ),
    ];
    const script = path.join(dataDir, 'mix.lua');
    fs.writeFileSync(
      script,
      `local paths = {${paths.map((p) => JSON.stringify(p)).join(',')}}\n` +
        'local i = 0\n' +
        'request = function()\n  i = i % #paths + 1\n  return wrk.format("GET", paths[i])\nend\n',
    );
    const mix = { connections: 50, headers: { ...headers, 'accept-encoding': 'br, gzip' }, script };
    // The first pass makes and compresses every answer of the mix; the measured one is served warm.
    const making = wrk(loadedBase, { ...mix, seconds: 5 });
    const load = wrk(loadedBase, { ...mix, seconds: 20 });
    const rss = peakRssMb(loaded.pid!);
    results.check(
      rss <= TARGETS.servePeakRssMb && load.errors + making.errors === 0,
      `mixed load: ${making.rps.toFixed(0)} req/s while the answers are made, then ${load.rps.toFixed(0)} req/s, ` +
        `p99 ${load.p99Ms.toFixed(1)} ms; peak RSS ${rss.toFixed(0)} MB ` +
        `(target ≤ ${TARGETS.servePeakRssMb} MB${load.errors ? `; ${load.errors} errors` : ''})`,
    );
  } finally {
    for (const child of started) await stop(child);
    await postgres?.destroy();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  requireWrk();
  const treeDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-scale-tree-'));
  try {
    const tree = writeTree(treeDir, { resources: RESOURCES, slug: 'bench', contentChars: 500 });
    const results = verdicts();
    for (const stack of STACKS) await measureStack(stack, tree, results);
    console.log(results.failures === 0 ? 'all targets met' : `${results.failures} target(s) missed`);
    return results.failures === 0 ? 0 : 1;
  } finally {
    fs.rmSync(treeDir, { recursive: true, force: true });
  }
}

process.exitCode = await main();
