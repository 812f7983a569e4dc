/**
 * What one large publish costs the rest of the service (D20): a valid `PUT` of a whole Catalog of
 * 100,000 Resources (BENCH_PUBLISH_RESOURCES), and a wrong one of 60,000, sent to a fresh service
 * started as `npm start` starts it. For each: the answer's time, the worst event-loop delay inside the
 * service while it ran (`nodejs_eventloop_lag_max_seconds`, which prom-client reads from
 * `perf_hooks.monitorEventLoopDelay` and resets at every scrape), the longest wait of a reader of
 * another account asking every 50 ms, and the service's peak RSS, with the goals beside. On SQLite
 * and on PostgreSQL (a throwaway cluster, as the test suite starts it); BENCH_PUBLISH_STACKS
 * (`sqlite,postgres`) says which.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { PostgresServer } from '../test/helpers/servers.js';
import {
  createReadKey,
  freePort,
  peakRssMb,
  startPostgresDatabase,
  startService,
  stop,
  waitForReady,
} from './support.js';

const RESOURCES = Number(process.env.BENCH_PUBLISH_RESOURCES ?? 100_000);
const WRONG_RESOURCES = 60_000;
const STACKS = (process.env.BENCH_PUBLISH_STACKS ?? 'sqlite,postgres').split(',');
/** D20's goals for a valid publish of 100,000 Resources. */
const MAX_DELAY_MS = 100;
const MAX_RSS_MB = 300;

async function lagMaxMs(metrics: string): Promise<number> {
  const text = await (await fetch(metrics)).text();
  const match = /^nodejs_eventloop_lag_max_seconds\s+([0-9.e+-]+)/m.exec(text);
  return match ? Number(match[1]) * 1000 : Number.NaN;
}

/** A whole Catalog's body of `count` Resources of about 100 bytes of content each, valid or not. */
export function publishBody(count: number, valid: boolean): string {
  const resources = Array.from({ length: count }, (_, i) =>
    valid
      ? {
          slug: `resource-${i}`,
          kind: 'document',
          title: `Resource ${i}`,
          version: '1.0.0',
          mediaType: 'text/markdown',
          content: `# Resource ${i}\n\n${'Steps to follow. '.repeat(5)}\n`,
          manifest: { order: i, tags: ['runbook'] },
        }
      : { slug: `R${i}`, kind: 'nope', title: '', version: '', mediaType: '', content: i },
  );
  return JSON.stringify({ name: 'Publish bench', version: '1', resources });
}

interface Outcome {
  readonly status: number;
  readonly seconds: number;
  readonly delayMs: number;
  readonly readerWaitMs: number;
}

async function publishOnce(
  base: string,
  metrics: string,
  key: string,
  slug: string,
  payload: string,
): Promise<Outcome> {
  await lagMaxMs(metrics);
  let reading = true;
  let readerWaitMs = 0;
  const reader = (async () => {
    while (reading) {
      const started = performance.now();
      // The service's own Catalogs: an answer the publish leaves as it is (a list of the account's
      // would hold the new Catalog's 100,000 pins, a cost of its own).
      const read = await fetch(`${base}/v3/playbook/catalogs?sourceScope=svc&pageSize=5`, {
        headers: { 'x-api-key': key },
      });
      await read.arrayBuffer();
      readerWaitMs = Math.max(readerWaitMs, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  const started = performance.now();
  const answer = await fetch(`${base}/v3/playbook/catalogs/org/${slug}`, {
    method: 'PUT',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: payload,
  });
  await answer.arrayBuffer();
  const seconds = (performance.now() - started) / 1000;
  reading = false;
  await reader;
  return { status: answer.status, seconds, delayMs: await lagMaxMs(metrics), readerWaitMs };
}

/** Runs the publish benchmark on each stack; returns how many goals were missed. */
export async function benchPublish(inherited: NodeJS.ProcessEnv): Promise<number> {
  let missed = 0;
  for (const stack of STACKS) missed += await benchPublishOn(stack, inherited);
  return missed;
}

async function benchPublishOn(stack: string, inherited: NodeJS.ProcessEnv): Promise<number> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-publish-'));
  const env: NodeJS.ProcessEnv = {
    ...inherited,
    PLAYBOOK_DATA_DIR: dataDir,
    PLAYBOOK_RATE_LIMIT_MAX: '1000000000',
    // A deployment on PostgreSQL has no data directory to keep a generated key in: it must be given one.
    PLAYBOOK_DEPLOYMENT_KEY: randomBytes(32).toString('base64'),
  };
  let postgres: PostgresServer | undefined;
  if (stack === 'postgres') {
    const started = await startPostgresDatabase();
    postgres = started.server;
    env.PLAYBOOK_DATABASE_URL = started.url;
  }
  const port = await freePort();
  const metricsPort = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const metrics = `http://127.0.0.1:${metricsPort}/metrics`;
  const service = startService(port, { ...env, PLAYBOOK_METRICS_PORT: String(metricsPort) });
  let missed = 0;
  try {
    await waitForReady(`${base}/readyz`, service);
    const key = await createReadKey(base, env, ['playbook:read', 'playbook:write']);
    const idleMb = peakRssMb(service.pid!);
    const wrong = publishBody(WRONG_RESOURCES, false);
    const refused = await publishOnce(base, metrics, key, 'refused', wrong);
    const valid = publishBody(RESOURCES, true);
    const published = await publishOnce(base, metrics, key, 'published', valid);
    const peakMb = peakRssMb(service.pid!);
    const line = (name: string, bytes: number, outcome: Outcome) =>
      `${name} (${(bytes / 1e6).toFixed(1)} MB): ${outcome.status} in ${outcome.seconds.toFixed(2)} s; ` +
      `worst event-loop delay ${outcome.delayMs.toFixed(0)} ms; a reader's longest wait ${outcome.readerWaitMs.toFixed(0)} ms`;
    console.log(`publishing on ${stack} (D20), one service started idle at ${idleMb.toFixed(0)} MB RSS:`);
    console.log(`  ${line(`${WRONG_RESOURCES} wrong Resources`, wrong.length, refused)}`);
    console.log(`  ${line(`${RESOURCES} valid Resources`, valid.length, published)}`);
    const verdicts = [
      [`worst event-loop delay of the valid publish ≤ ${MAX_DELAY_MS} ms`, published.delayMs <= MAX_DELAY_MS],
      [`peak RSS ≤ ${MAX_RSS_MB} MB (${peakMb.toFixed(0)} MB)`, peakMb <= MAX_RSS_MB],
      [
        'the wrong body refused (400) and the valid one published (201)',
        refused.status === 400 && published.status === 201,
      ],
    ] as const;
    for (const [goal, met] of verdicts) {
      console.log(`  ${met ? 'ok' : 'MISSED'}: ${goal}`);
      if (!met) missed++;
    }
  } finally {
    await stop(service);
    await postgres?.destroy();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  return missed;
}

// `npm run bench:publish` runs this part alone (`npm run bench` runs it after the reads).
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const missed = await benchPublish(process.env);
  console.log(missed === 0 ? 'all targets met' : `${missed} target(s) missed`);
  process.exitCode = missed === 0 ? 0 : 1;
}
