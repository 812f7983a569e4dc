/**
 * `npm run bench`: the service's read path against a floor, in one run, on this machine.
 *
 * Imports a catalog of 1,000 resources (details of about 2.9 KB) through `playbook import`, starts the service
 * as `npm start` does (`playbook serve`, default log level, as a process of its own, with its metrics
 * listener on and scraped every second) and a floor (see floor.ts) that sends the very answers captured
 * from the service. The last row holds the service against a second instance without metrics: what
 * metrics cost (D25). Then a large publish, and what it costs the rest (publish.ts, D20). Each server in turn gets core 0 and wrk (50 connections) core 1. Prints req/s,
 * p50 and p99 of both and the service's ratio to the floor, and exits 1 when a target is missed. Absolute numbers move by a fifth from run to run on a shared
 * machine; the ratios much less.
 *
 * The machine's speed drifts while it runs (other tenants share its cores), so the two servers take
 * turns: ROUNDS rounds of one run each, which goes first alternating from round to round, and the
 * ratio is the median of the rounds' ratios.
 * BENCH_DURATION_S (default 4) sets the length of each run, BENCH_ROUNDS (5) their number and
 * BENCH_RESOURCES (1000) the size of the catalog. BENCH_ONLY (`reads,publish,webhooks` by default)
 * runs the cases named: the reads against the floor, the large publish (publish.ts), webhooks
 * (webhooks.ts), and what the sync feed costs (sync.ts, D27: 1,000 held requests on one instance, and an
 * initial sync of 100,000 Resources; its empty poll is a row of the reads' table).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { FloorRoute } from './floor.js';
import { benchPublish } from './publish.js';
import {
  cli,
  createReadKey,
  freePort,
  type LoadResult,
  PINNING,
  peakRssMb,
  pinned,
  ROOT,
  requireWrk,
  startScraper,
  startService,
  stop,
  waitForReady,
  writeTree,
  wrk,
} from './support.js';
import { benchHeldRequests, benchInitialSync, currentPosition } from './sync.js';
import { benchWebhooks } from './webhooks.js';

const RESOURCES = Number(process.env.BENCH_RESOURCES ?? 1000);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const WARMUP_S = 3;
const CONNECTIONS = 50;
interface Scenario {
  readonly name: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly expectStatus: number;
  /** The least ratio to the floor, when there is a target. */
  readonly minRatio?: number;
  readonly maxP99Ms?: number;
  /** Which captured answer the floor sends (its own index by default): a 304 is held against a 200. */
  readonly floorOf?: number;
  /** Held against the same request to a second service without metrics, rather than the floor. */
  readonly versusMetricsOff?: boolean;
  /**
   * Loaded while another account publishes once a second (publisher.ts), and held against the same
   * request to the same service while nobody writes (D26).
   */
  readonly versusNoWrites?: boolean;
}

interface Captured {
  readonly status: number;
  readonly body: Buffer;
  readonly headers: Record<string, string>;
}

/** One answer of the service, its bytes as sent (`fetch` would decompress them). */
async function capture(base: string, key: string, scenario: Scenario): Promise<Captured> {
  const {
    statusCode,
    body,
    headers: sent,
  } = await new Promise<{
    statusCode: number;
    body: Buffer;
    headers: http.IncomingHttpHeaders;
  }>((resolve, reject) => {
    http
      .get(`${base}${scenario.path}`, { headers: { 'x-api-key': key, ...scenario.headers } }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({
            statusCode: response.statusCode ?? 0,
            body: Buffer.concat(chunks),
            headers: response.headers,
          }),
        );
        response.on('error', reject);
      })
      .on('error', reject);
  });
  if (statusCode !== scenario.expectStatus) {
    throw new Error(`${scenario.name}: the service answered ${statusCode}: ${body.toString()}`);
  }
  const headers: Record<string, string> = {};
  for (const name of ['content-type', 'content-encoding', 'etag', 'vary', 'cache-control']) {
    const value = sent[name];
    if (typeof value === 'string') headers[name] = value;
  }
  return { status: statusCode, body, headers };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Each figure's median over the rounds; errors and requests are summed. */
function medianOf(results: readonly LoadResult[]): LoadResult {
  return {
    rps: median(results.map((r) => r.rps)),
    p50Ms: median(results.map((r) => r.p50Ms)),
    p99Ms: median(results.map((r) => r.p99Ms)),
    errors: results.reduce((sum, r) => sum + r.errors, 0),
    requests: results.reduce((sum, r) => sum + r.requests, 0),
  };
}

function row(cells: readonly string[], widths: readonly number[]): string {
  return cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
}

const CASES = ['reads', 'publish', 'webhooks', 'sync'] as const;

/** The cases BENCH_ONLY names, all of them by default. */
function selectedCases(): Set<string> {
  const named = (process.env.BENCH_ONLY ?? CASES.join(',')).split(',').map((name) => name.trim());
  const unknown = named.filter((name) => !(CASES as readonly string[]).includes(name));
  if (unknown.length > 0)
    throw new Error(`BENCH_ONLY: unknown case ${unknown.join(', ')} (known: ${CASES.join(', ')})`);
  return new Set(named);
}

async function main(): Promise<number> {
  const cases = selectedCases();
  if (cases.has('reads')) requireWrk();
  const { LOG_LEVEL: _default, ...inherited } = process.env;
  let failures = 0;
  if (cases.has('reads')) failures += await benchReads();
  if (cases.has('publish')) failures += await benchPublish(inherited);
  if (cases.has('webhooks')) failures += await benchWebhooks(inherited);
  if (cases.has('sync')) failures += await benchSync(inherited);
  console.log(failures === 0 ? 'all targets met' : `${failures} target(s) missed`);
  return failures === 0 ? 0 : 1;
}

/** What the sync feed costs beside its empty poll (a row of the reads' table): held requests, an initial sync. */
async function benchSync(environment: NodeJS.ProcessEnv): Promise<number> {
  const env = { ...environment, PLAYBOOK_RATE_LIMIT_MAX: '1000000000' };
  console.log('held sync requests:');
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-held-'));
  let failures = 0;
  try {
    failures += await benchHeldRequests(env, dataDir);
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  console.log('initial sync of 100,000 resources:');
  return failures + (await benchInitialSync(env));
}

/** The read path against its floor, and what metrics and another account's writes cost it. */
async function benchReads(): Promise<number> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-'));
  const { LOG_LEVEL: _shipsWithDefault, ...inherited } = process.env;
  const env = {
    ...inherited,
    PLAYBOOK_DATA_DIR: dataDir,
    // The limit is counted on every request as usual; it is only set high enough never to refuse.
    PLAYBOOK_RATE_LIMIT_MAX: '1000000000',
  };
  const tree = writeTree(path.join(dataDir, 'tree'), {
    resources: RESOURCES,
    slug: 'bench',
    contentChars: 500,
  });
  cli(['import', tree, '--owner', 'svc'], env);

  const servicePort = await freePort();
  const metricsPort = await freePort();
  const bareServicePort = await freePort();
  const floorPort = await freePort();
  const service = `http://127.0.0.1:${servicePort}`;
  const bareService = `http://127.0.0.1:${bareServicePort}`;
  const floor = `http://127.0.0.1:${floorPort}`;
  // As a production deployment runs: metrics on, and scraped every second (five to fifteen times as
  // often as Prometheus usually does). A second instance without metrics measures what they cost.
  const serviceProcess = startService(servicePort, { ...env, PLAYBOOK_METRICS_PORT: String(metricsPort) });
  const bareServiceProcess = startService(bareServicePort, env);
  let floorProcess: ReturnType<typeof spawn> | undefined;
  let scraper: ReturnType<typeof startScraper> | undefined;
  let failures = 0;
  try {
    await waitForReady(`${service}/readyz`, serviceProcess);
    await waitForReady(`${bareService}/readyz`, bareServiceProcess);
    scraper = startScraper(`http://127.0.0.1:${metricsPort}/metrics`);
    const key = await createReadKey(service, env);
    const headers = { 'x-api-key': key };
    const firstPage = (await (
      await fetch(`${service}/v3/playbook/catalogs/svc/bench/resources?pageSize=25&page=3`, { headers })
    ).json()) as { data: { id: string; currentVersion: { id: string } }[] };
    const resource = firstPage.data[7]!;
    const detailPath = `/v3/playbook/resources/${resource.id}`;
    // Asked as wrk asks, without Accept-Encoding: the identity representation's validator.
    const detailEtag =
      (await capture(service, key, { name: 'detail', path: detailPath, headers: {}, expectStatus: 200 }))
        .headers.etag ?? '';
    const pagePath = '/v3/playbook/catalogs/svc/bench/resources?pageSize=25&page=3';

    const scenarios: Scenario[] = [
      {
        name: 'resource detail',
        path: detailPath,
        headers: {},
        expectStatus: 200,
        minRatio: 0.5,
        maxP99Ms: 10,
      },
      {
        name: 'page of 25 resources',
        path: pagePath,
        headers: {},
        expectStatus: 200,
        minRatio: 0.5,
        maxP99Ms: 10,
      },
      {
        name: 'version detail',
        path: `${detailPath}/versions/${resource.currentVersion.id}`,
        headers: {},
        expectStatus: 200,
        minRatio: 0.5,
      },
      {
        name: '304 revalidation of the detail',
        path: detailPath,
        headers: { 'if-none-match': detailEtag },
        expectStatus: 304,
        minRatio: 0.6,
        floorOf: 0,
      },
      {
        name: 'page of 25, compressed',
        path: pagePath,
        headers: { 'accept-encoding': 'br, gzip' },
        expectStatus: 200,
        minRatio: 0.5,
      },
      {
        // D26: another account's writes leave this caller's answers in memory.
        name: 'detail, another account writing',
        path: detailPath,
        headers: {},
        expectStatus: 200,
        minRatio: 0.9,
        versusNoWrites: true,
      },
      {
        // D25: what metrics cost, against the same service without them, rather than the floor.
        name: 'detail, metrics on vs off',
        path: detailPath,
        headers: {},
        expectStatus: 200,
        minRatio: 0.95,
        versusMetricsOff: true,
      },
    ];
    const writerKey = await createReadKey(service, env, ['playbook:read', 'playbook:write'], 'writes');
    const catalogMade = await fetch(`${service}/v3/playbook/catalogs/org/writes`, {
      method: 'PUT',
      headers: { 'x-api-key': writerKey, 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'Written while others read',
        version: '1',
        resources: [
          {
            slug: 'doc',
            kind: 'document',
            title: 'Doc',
            version: '0',
            mediaType: 'text/plain',
            content: '0',
          },
        ],
      }),
    });
    if (catalogMade.status !== 201) throw new Error(`the writers' catalog answered ${catalogMade.status}`);
    // D27: a follower asking at its current position, without wait: nothing changed, answered from
    // memory. Taken once the other account's catalog is written, so that the position is the log's head.
    const syncToken = await currentPosition(service, headers);
    scenarios.splice(5, 0, {
      name: 'empty sync poll',
      path: `/v3/playbook/sync?syncToken=${syncToken}`,
      headers: {},
      expectStatus: 200,
      minRatio: 0.5,
    });
    let publishes = { written: 0, failed: 0 };
    const captured: Captured[] = [];
    for (const scenario of scenarios) captured.push(await capture(service, key, scenario));
    const floorRoutes: FloorRoute[] = captured.map((answer, index) => {
      const json = answer.headers['content-encoding'] === undefined && answer.body.length > 0;
      // A JSON answer's content type is Fastify's to set as it serialises; raw bytes carry theirs.
      const { 'content-type': contentType, ...rest } = answer.headers;
      const headers = json || contentType === undefined ? rest : { ...rest, 'content-type': contentType };
      return { path: `/answer/${index}`, body: answer.body.toString('base64'), json, headers };
    });
    const routesFile = path.join(dataDir, 'floor.json');
    fs.writeFileSync(routesFile, JSON.stringify(floorRoutes));
    const [command, args] = pinned(0, process.execPath, [
      path.join(ROOT, 'dist-bench', 'bench', 'floor.js'),
      routesFile,
      String(floorPort),
    ]);
    floorProcess = spawn(command, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    await waitForReady(`${floor}/ready`, floorProcess);

    console.log(
      `${RESOURCES} resources; detail ${captured[0]!.body.length} B, page of 25 ${captured[1]!.body.length} B ` +
        `(${captured[4]!.body.length} B as ${captured[4]!.headers['content-encoding'] ?? 'identity'}); ` +
        `${CONNECTIONS} connections, ${ROUNDS} rounds of ${DURATION_S} s each; ` +
        (PINNING ? 'server on core 0, wrk on core 1' : 'NOT pinned: taskset or a second core is missing'),
    );
    const widths = [32, 9, 7, 7, 9, 7, 7, 7, 22];
    console.log(
      row(['request', 'req/s', 'p50 ms', 'p99 ms', 'floor', 'p50 ms', 'p99 ms', 'ratio', 'verdict'], widths),
    );
    for (const [index, scenario] of scenarios.entries()) {
      const url = `${service}${scenario.path}`;
      const load = { connections: CONNECTIONS, headers: { ...headers, ...scenario.headers } };
      const [floorUrl, floorLoad] = scenario.versusMetricsOff
        ? [`${bareService}${scenario.path}`, load]
        : scenario.versusNoWrites
          ? [url, load]
          : [`${floor}/answer/${scenario.floorOf ?? index}`, { connections: CONNECTIONS }];
      wrk(url, { ...load, seconds: WARMUP_S });
      wrk(floorUrl, { ...floorLoad, seconds: WARMUP_S });
      const rounds: { ours: LoadResult; theirs: LoadResult }[] = [];
      const publisher = scenario.versusNoWrites ? new Publisher(service, writerKey) : undefined;
      const loadService = () => {
        publisher?.start();
        return wrk(url, { ...load, seconds: DURATION_S });
      };
      const loadFloor = () => wrk(floorUrl, { ...floorLoad, seconds: DURATION_S });
      for (let round = 0; round < ROUNDS; round++) {
        // Of two identical services, the one loaded second in a round served 5-14 % more: the order
        // alternates, so that neither side has it every time.
        if (round % 2 === 0) {
          const first = loadService();
          await publisher?.stop();
          rounds.push({ ours: first, theirs: loadFloor() });
        } else {
          const first = loadFloor();
          rounds.push({ ours: loadService(), theirs: first });
          await publisher?.stop();
        }
      }
      if (publisher) {
        publishes = publisher.counts;
        if (publishes.written < ROUNDS * (DURATION_S - 1) || publishes.failed > 0) {
          console.log(
            `MISSED: the other account published ${publishes.written} times, ${publishes.failed} failed`,
          );
          failures++;
        }
      }
      const ours = medianOf(rounds.map((r) => r.ours));
      const theirs = medianOf(rounds.map((r) => r.theirs));
      const ratio = median(rounds.map((r) => r.ours.rps / r.theirs.rps));
      const missed: string[] = [];
      if (ours.errors > 0) missed.push(`${ours.errors} errors`);
      if (scenario.minRatio !== undefined && ratio < scenario.minRatio)
        missed.push(`ratio < ${scenario.minRatio}`);
      if (scenario.maxP99Ms !== undefined && ours.p99Ms > scenario.maxP99Ms) {
        missed.push(`p99 > ${scenario.maxP99Ms} ms`);
      }
      if (missed.length > 0) failures++;
      const target = [
        scenario.minRatio === undefined ? '' : `≥ ${scenario.minRatio}×`,
        scenario.maxP99Ms === undefined ? '' : `p99 ≤ ${scenario.maxP99Ms}`,
      ]
        .filter(Boolean)
        .join(', ');
      console.log(
        row(
          [
            scenario.name,
            ours.rps.toFixed(0),
            ours.p50Ms.toFixed(2),
            ours.p99Ms.toFixed(2),
            theirs.rps.toFixed(0),
            theirs.p50Ms.toFixed(2),
            theirs.p99Ms.toFixed(2),
            `${ratio.toFixed(2)}×`,
            missed.length === 0 ? `ok (${target || 'no target'})` : `MISSED: ${missed.join(', ')}`,
          ],
          widths,
        ),
      );
    }
    const scrapes = await scraper.stop();
    scraper = undefined;
    console.log(
      `service peak RSS: ${peakRssMb(serviceProcess.pid!).toFixed(0)} MB; metrics scraped ${scrapes} times; ` +
        `the other account published ${publishes.written} times while its neighbour read`,
    );

    if (scrapes === 0) {
      console.log('MISSED: the metrics were never scraped');
      failures++;
    }
  } finally {
    await scraper?.stop();
    await stop(serviceProcess);
    await stop(bareServiceProcess);
    if (floorProcess) await stop(floorProcess);
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  return failures;
}

/** Another account's CI job (publisher.ts), run while the service is loaded, on the load generator's core. */
class Publisher {
  readonly counts = { written: 0, failed: 0 };
  private child: ReturnType<typeof spawn> | undefined;
  private output = '';

  constructor(
    private readonly base: string,
    private readonly key: string,
  ) {}

  start(): void {
    const [command, args] = pinned(1, process.execPath, [
      path.join(ROOT, 'dist-bench', 'bench', 'publisher.js'),
      this.base,
      this.key,
    ]);
    this.output = '';
    this.child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    this.child.stdout?.on('data', (chunk: Buffer) => {
      this.output += chunk.toString();
    });
  }

  async stop(): Promise<void> {
    if (!this.child) return;
    const closed = new Promise((resolve) => this.child!.once('close', resolve));
    await stop(this.child);
    await closed;
    this.child = undefined;
    const counts = JSON.parse(this.output.trim() || '{"written":0,"failed":1}') as typeof this.counts;
    this.counts.written += counts.written;
    this.counts.failed += counts.failed;
  }
}

process.exitCode = await main();
