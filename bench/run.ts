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
import { topSelfTime } from './profile.js';
import { benchPublish } from './publish.js';
import {
  cli,
  cpuMs,
  createReadKey,
  freePort,
  idleRssMb as idleRss,
  type LoadResult,
  PINNING,
  peakRssMb,
  pinned,
  ROOT,
  requireWrk,
  rssMb,
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
/** Runs per row: the spread of their ratios (max − min) is what a recorded ratio may move by. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARMUP_S = 3;
/** How long the service is left idle once ready before its idle RSS is read (`idleRssMb`). */
const IDLE_S = 30;
const CONNECTIONS = 50;
/** The ratios of the last recorded run, one per row, kept in the repository; `BENCH_RECORD=1` writes them. */
const RECORDED = path.join(ROOT, 'bench', 'recorded-ratios.json');

interface Scenario {
  readonly name: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly expectStatus: number;
  /** The least ratio to the buffer floor (buffer-floor.ts), when there is a target. */
  readonly minBuffer?: number;
  /** The least ratio to the object floor (floor.ts), when there is a target. */
  readonly minObject?: number;
  readonly maxP99Ms?: number;
  /**
   * Which captured answer the object floor sends (its own index by default): a 304 is held against
   * the 200 it saves; the buffer floor sends each row's own answer.
   */
  readonly floorOf?: number;
  /** Held against the same request to a second service without metrics, rather than the floors. */
  readonly versusMetricsOff?: boolean;
  /**
   * Loaded while another account publishes once a second (publisher.ts), and held against the same
   * request to the same service while nobody writes (D26).
   */
  readonly versusNoWrites?: boolean;
  /**
   * D32: sent with a key restricted in every way (Catalogs, addresses, a rate of its own), and held
   * against the same request to the same service with the unrestricted key.
   */
  readonly versusUnrestricted?: boolean;
  /** The least ratio to what it is held against, for the three rows above. */
  readonly minVersus?: number;
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

/** A load's figures, with the CPU its server spent per request answered. */
interface Measured extends LoadResult {
  readonly cpuUs: number;
}

/** Each figure's median over the rounds; errors and requests are summed. */
function medianOf(results: readonly Measured[]): Measured {
  return {
    rps: median(results.map((r) => r.rps)),
    p50Ms: median(results.map((r) => r.p50Ms)),
    p99Ms: median(results.map((r) => r.p99Ms)),
    cpuUs: median(results.map((r) => r.cpuUs)),
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

/** A server loaded by wrk: where it is asked, with what, and the process whose CPU it spends. */
interface Target {
  readonly url: string;
  readonly load: { readonly connections: number; readonly headers?: Record<string, string> };
  readonly pid: number;
  /** Started before its load and stopped after it (another account publishing meanwhile). */
  readonly around?: { start(): void; stop(): Promise<void> };
}

/** One load of `target`, with the CPU its server spent per request answered. */
async function measure(target: Target, seconds: number): Promise<Measured> {
  target.around?.start();
  const before = cpuMs(target.pid);
  const result = wrk(target.url, { ...target.load, seconds });
  const spentMs = cpuMs(target.pid) - before;
  await target.around?.stop();
  return { ...result, cpuUs: result.requests > 0 ? (spentMs * 1000) / result.requests : Number.NaN };
}

/** The ratios recorded by an earlier run, by row: what this run's are compared with. */
type Recorded = Record<string, { readonly ratio: number; readonly versus: string }>;

function readRecorded(): Recorded {
  return fs.existsSync(RECORDED) ? (JSON.parse(fs.readFileSync(RECORDED, 'utf8')) as Recorded) : {};
}

/** The read path against its floors, and what metrics and another account's writes cost it. */
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
  const objectFloorPort = await freePort();
  const bufferFloorPort = await freePort();
  const service = `http://127.0.0.1:${servicePort}`;
  const bareService = `http://127.0.0.1:${bareServicePort}`;
  const objectFloor = `http://127.0.0.1:${objectFloorPort}`;
  const bufferFloor = `http://127.0.0.1:${bufferFloorPort}`;
  // As a production deployment runs: metrics on, and scraped every second (five to fifteen times as
  // often as Prometheus usually does). A second instance without metrics measures what they cost.
  const serviceProcess = startService(servicePort, { ...env, PLAYBOOK_METRICS_PORT: String(metricsPort) });
  const bareServiceProcess = startService(bareServicePort, env);
  const floors: ReturnType<typeof spawn>[] = [];
  let scraper: ReturnType<typeof startScraper> | undefined;
  let failures = 0;
  try {
    await waitForReady(`${service}/readyz`, serviceProcess);
    await waitForReady(`${bareService}/readyz`, bareServiceProcess);
    // Idle: once the memory start-up left is given back, nothing asked of the service yet.
    const readyRssMb = rssMb(serviceProcess.pid!);
    const idleRssMb = await idleRss(serviceProcess.pid!, IDLE_S);
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
    // A build from before D32 (BENCH_CLI, a baseline) makes no restricted key: its row is left out.
    const restrictedKey = await createReadKey(service, env, ['playbook:read'], 'bench', {
      catalogs: ['svc/bench'],
      allowedIps: ['127.0.0.0/8', '::1'],
      rateLimit: { limit: 500_000_000, windowSeconds: 60 },
    }).catch((error: Error) => {
      console.log(`no row for a restricted key: ${error.message}`);
      return undefined;
    });

    const scenarios: Scenario[] = [
      {
        name: 'resource detail',
        path: detailPath,
        headers: {},
        expectStatus: 200,
        minBuffer: 0.7,
        maxP99Ms: 5,
      },
      {
        name: 'page of 25 resources',
        path: pagePath,
        headers: {},
        expectStatus: 200,
        minBuffer: 0.7,
        maxP99Ms: 5,
      },
      {
        name: 'version detail',
        path: `${detailPath}/versions/${resource.currentVersion.id}`,
        headers: {},
        expectStatus: 200,
        minObject: 0.5,
      },
      {
        name: '304 revalidation of the detail',
        path: detailPath,
        headers: { 'if-none-match': detailEtag },
        expectStatus: 304,
        minBuffer: 0.5,
        minObject: 0.6,
        floorOf: 0,
      },
      {
        name: 'page of 25, compressed',
        path: pagePath,
        headers: { 'accept-encoding': 'br, gzip' },
        expectStatus: 200,
        minBuffer: 0.5,
      },
      {
        // D26: another account's writes leave this caller's answers in memory.
        name: 'detail, another account writing',
        path: detailPath,
        headers: {},
        expectStatus: 200,
        minVersus: 0.9,
        versusNoWrites: true,
      },
      ...(restrictedKey === undefined
        ? []
        : [
            {
              // D32: a key restricted to the Catalog, this machine's addresses and a rate of its own
              // reads as fast as one without restrictions.
              name: 'detail, restricted key',
              path: detailPath,
              headers: { 'x-api-key': restrictedKey },
              expectStatus: 200,
              minVersus: 0.95,
              versusUnrestricted: true,
            },
          ]),
      {
        // D25: what metrics cost, against the same service without them, rather than the floor.
        name: 'detail, metrics on vs off',
        path: detailPath,
        headers: {},
        expectStatus: 200,
        minVersus: 0.95,
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
      minObject: 0.5,
    });
    let publishes = { written: 0, failed: 0 };
    const captured: Captured[] = [];
    for (const scenario of scenarios) captured.push(await capture(service, key, scenario));
    const floorRoutes: FloorRoute[] = captured.map((answer, index) => {
      const json = answer.headers['content-encoding'] === undefined && answer.body.length > 0;
      // A JSON answer's content type is Fastify's to set as it serialises; raw bytes carry theirs.
      const { 'content-type': contentType, ...rest } = answer.headers;
      const headers = json || contentType === undefined ? rest : { ...rest, 'content-type': contentType };
      return {
        path: `/answer/${index}`,
        status: answer.status,
        body: answer.body.toString('base64'),
        json,
        headers,
      };
    });
    const routesFile = path.join(dataDir, 'floor.json');
    fs.writeFileSync(routesFile, JSON.stringify(floorRoutes));
    // The buffer floor sends every header as captured, the content type too.
    const bufferRoutesFile = path.join(dataDir, 'buffer-floor.json');
    fs.writeFileSync(
      bufferRoutesFile,
      JSON.stringify(
        captured.map((answer, index) => ({
          path: `/answer/${index}`,
          status: answer.status,
          body: answer.body.toString('base64'),
          json: false,
          headers: answer.headers,
        })),
      ),
    );
    for (const [script, file, port] of [
      ['floor.js', routesFile, objectFloorPort],
      ['buffer-floor.js', bufferRoutesFile, bufferFloorPort],
    ] as const) {
      const [command, args] = pinned(0, process.execPath, [
        path.join(ROOT, 'dist-bench', 'bench', script),
        file,
        String(port),
      ]);
      const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'inherit'] });
      floors.push(child);
      await waitForReady(`http://127.0.0.1:${port}/ready`, child);
    }
    const [objectFloorProcess, bufferFloorProcess] = floors as [
      ReturnType<typeof spawn>,
      ReturnType<typeof spawn>,
    ];

    console.log(
      `${RESOURCES} resources; detail ${captured[0]!.body.length} B, page of 25 ${captured[1]!.body.length} B ` +
        `(${captured[4]!.body.length} B as ${captured[4]!.headers['content-encoding'] ?? 'identity'}); ` +
        `${CONNECTIONS} connections, ${ROUNDS} runs of ${DURATION_S} s a row, the servers in turns; ` +
        (PINNING ? 'server on core 0, wrk on core 1' : 'NOT pinned: taskset or a second core is missing'),
    );
    console.log(
      'ratios to the buffer floor (Node alone, the captured bytes) and the object floor (Fastify, an object serialised per request); µs: CPU per request',
    );
    const widths = [32, 8, 7, 6, 8, 6, 6, 8, 6, 6, 24];
    console.log(
      row(
        ['request', 'req/s', 'p99 ms', 'µs', 'buffer', 'µs', 'ratio', 'object', 'µs', 'ratio', 'verdict'],
        widths,
      ),
    );
    const recorded = readRecorded();
    const recording: Record<string, { ratio: number; versus: string }> = {};
    const moved: string[] = [];
    for (const [index, scenario] of scenarios.entries()) {
      const url = `${service}${scenario.path}`;
      const load = { connections: CONNECTIONS, headers: { ...headers, ...scenario.headers } };
      const ours: Target = { url, load, pid: serviceProcess.pid! };
      const publisher = scenario.versusNoWrites ? new Publisher(service, writerKey) : undefined;
      const others: Target[] = scenario.versusMetricsOff
        ? [{ url: `${bareService}${scenario.path}`, load, pid: bareServiceProcess.pid! }]
        : scenario.versusUnrestricted
          ? [{ url, load: { connections: CONNECTIONS, headers }, pid: serviceProcess.pid! }]
          : scenario.versusNoWrites
            ? [ours]
            : [
                {
                  url: `${bufferFloor}/answer/${index}`,
                  load: { connections: CONNECTIONS },
                  pid: bufferFloorProcess.pid!,
                },
                {
                  url: `${objectFloor}/answer/${scenario.floorOf ?? index}`,
                  load: { connections: CONNECTIONS },
                  pid: objectFloorProcess.pid!,
                },
              ];
      const loaded: Target = publisher
        ? { ...ours, around: { start: () => publisher.start(), stop: () => publisher.stop() } }
        : ours;
      for (const target of [loaded, ...others]) wrk(target.url, { ...target.load, seconds: WARMUP_S });
      const runs: Measured[][] = [];
      for (let round = 0; round < ROUNDS; round++) {
        // Of two identical services, the one loaded second in a round served 5-14 % more: the order
        // turns from round to round, so that no server has the same place every time.
        const order = [loaded, ...others].map((target, i) => ({ target, i }));
        for (let turn = 0; turn < round % order.length; turn++) order.push(order.shift()!);
        const results: Measured[] = [];
        for (const { target, i } of order) results[i] = await measure(target, DURATION_S);
        runs.push(results);
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
      const mine = medianOf(runs.map((r) => r[0]!));
      const against = others.map((_, i) => medianOf(runs.map((r) => r[i + 1]!)));
      const ratios = others.map((_, i) => runs.map((r) => r[0]!.rps / r[i + 1]!.rps));
      const ratio = ratios.map((values) => median(values));
      const spread = ratios.map((values) => Math.max(...values) - Math.min(...values));
      const missed: string[] = [];
      if (mine.errors > 0) missed.push(`${mine.errors} errors`);
      const targets: [number | undefined, number | undefined, string][] =
        scenario.versusMetricsOff || scenario.versusNoWrites || scenario.versusUnrestricted
          ? [[scenario.minVersus, ratio[0], 'versus']]
          : [
              [scenario.minBuffer, ratio[0], 'buffer'],
              [scenario.minObject, ratio[1], 'object'],
            ];
      for (const [min, value, versus] of targets) {
        if (min !== undefined && value !== undefined && value < min) missed.push(`${versus} < ${min}`);
      }
      if (scenario.maxP99Ms !== undefined && mine.p99Ms > scenario.maxP99Ms) {
        missed.push(`p99 > ${scenario.maxP99Ms} ms`);
      }
      if (missed.length > 0) failures++;
      const goal = [
        ...targets.flatMap(([min, , versus]) => (min === undefined ? [] : [`${versus} ≥ ${min}`])),
        ...(scenario.maxP99Ms === undefined ? [] : [`p99 ≤ ${scenario.maxP99Ms}`]),
      ].join(', ');
      // The row's ratio is compared with the one recorded: it moved when it is further from it than
      // this run's own spread.
      const versus = others.length === 1 ? 'versus' : 'buffer';
      recording[scenario.name] = { ratio: ratio[0]!, versus };
      const before = recorded[scenario.name];
      if (before && before.versus === versus && Math.abs(ratio[0]! - before.ratio) > spread[0]!) {
        moved.push(
          `${scenario.name}: ${before.ratio.toFixed(2)}× → ${ratio[0]!.toFixed(2)}× (spread ${spread[0]!.toFixed(2)})`,
        );
      }
      const cells = (measured: Measured | undefined, value: number | undefined) =>
        measured === undefined
          ? ['', '', '']
          : [measured.rps.toFixed(0), measured.cpuUs.toFixed(1), `${value!.toFixed(2)}×`];
      console.log(
        row(
          [
            scenario.name,
            mine.rps.toFixed(0),
            mine.p99Ms.toFixed(2),
            mine.cpuUs.toFixed(1),
            ...cells(against[0], ratio[0]),
            ...cells(against[1], ratio[1]),
            missed.length === 0 ? `ok (${goal || 'no target'})` : `MISSED: ${missed.join(', ')}`,
          ],
          widths,
        ),
      );
    }
    const scrapes = await scraper.stop();
    scraper = undefined;
    console.log(
      `service idle RSS after start: ${idleRssMb.toFixed(0)} MB (goal 100 MB), left idle ${IDLE_S} s once ready ` +
        `(${readyRssMb.toFixed(0)} MB at readiness); peak RSS: ${peakRssMb(serviceProcess.pid!).toFixed(0)} MB; ` +
        `metrics scraped ${scrapes} times; the other account published ${publishes.written} times while its neighbour read`,
    );
    if (idleRssMb > 100) {
      console.log('MISSED: idle RSS over 100 MB');
      failures++;
    }
    console.log(
      moved.length === 0
        ? 'no row moved from its recorded ratio by more than its spread'
        : `rows that moved from their recorded ratio by more than their spread:\n  ${moved.join('\n  ')}`,
    );
    if (process.env.BENCH_RECORD === '1') {
      fs.writeFileSync(RECORDED, `${JSON.stringify(recording, null, 2)}\n`);
      console.log(`recorded these ratios in ${path.relative(ROOT, RECORDED)}`);
    }
    if (scrapes === 0) {
      console.log('MISSED: the metrics were never scraped');
      failures++;
    }
    await stop(serviceProcess);
    await profileDetail(env, detailPath);
  } finally {
    await scraper?.stop();
    await stop(serviceProcess);
    await stop(bareServiceProcess);
    for (const floor of floors) await stop(floor);
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  return failures;
}

/**
 * Where a cached detail read's CPU goes: the service started as `npm start` starts it, with V8's
 * sampling profiler on, loaded on the detail, and the top entries by self time over the load alone.
 */
async function profileDetail(env: NodeJS.ProcessEnv, detailPath: string): Promise<void> {
  const port = await freePort();
  const profiles = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-profile-'));
  const child = startService(port, env, ['--cpu-prof', `--cpu-prof-dir=${profiles}`]);
  try {
    const base = `http://127.0.0.1:${port}`;
    await waitForReady(`${base}/readyz`, child);
    const key = await createReadKey(base, env);
    const load = { connections: CONNECTIONS, headers: { 'x-api-key': key } };
    wrk(`${base}${detailPath}`, { ...load, seconds: WARMUP_S });
    const startedMs = Date.now();
    wrk(`${base}${detailPath}`, { ...load, seconds: DURATION_S });
    const loadMs = Date.now() - startedMs;
    await stop(child);
    console.log(`where a cached detail's CPU goes (self time, ${DURATION_S} s of load, main thread):`);
    for (const entry of topSelfTime(profiles, loadMs, 12)) console.log(`  ${entry}`);
  } finally {
    await stop(child);
    fs.rmSync(profiles, { recursive: true, force: true });
  }
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
