/**
 * What webhooks cost and how fast they arrive (D28), for `npm run bench` (BENCH_ONLY=webhooks runs this
 * case alone). On SQLite, with the service started as `npm start` starts it, pinned to core 0:
 *
 * 1. From commit to delivery: an account writes 100 changes a second (change-writer.js, each a new
 *    Resource version) while its endpoint, a local receiver (webhook-receiver.js), gets each as an
 *    event: the time from a write's answer (sent after its commit) to its event's arrival, p50 and
 *    p99, and how many arrived, the service doing nothing else.
 * 2. What reads lose: wrk on a Resource detail of the service while those writes go on, with the
 *    endpoint enabled (deliveries made) and disabled (none), in turns; the ratio of the two.
 * 3. The outbox's cost when a change of the service fans out to many accounts' endpoints: a
 *    `playbook import` of a 100-Resource service Catalog with no endpoint, then with 500 (25 accounts
 *    of 20, each taking every type), each delivery row written in the import's transaction.
 *
 * BENCH_DURATION_S (4) and BENCH_ROUNDS (3) as for the other cases; BENCH_WEBHOOK_RATE (100) changes a
 * second.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  cli,
  createReadKey,
  freePort,
  type LoadResult,
  pinned,
  ROOT,
  startService,
  stop,
  waitForReady,
  writeTree,
  wrk,
} from './support.js';

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RATE = Number(process.env.BENCH_WEBHOOK_RATE ?? 100);
const CONNECTIONS = 50;
const FAN_OUT_ACCOUNTS = 25;
const FAN_OUT_PER_ACCOUNT = 20;
/** The goal: reads keep at least this share of what they serve without webhooks. */
const MIN_READ_RATIO = 0.9;
/** The goal for a delivery's p99, from commit to arrival, on an idle receiver. */
const MAX_P99_MS = 1000;

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

/** A child of the bench on the load generator's core, whose last stdout line is JSON once stopped. */
function helper(
  script: string,
  args: string[],
): { child: ChildProcess; output: () => string; ready: Promise<void> } {
  const [command, commandArgs] = pinned(1, process.execPath, [
    path.join(ROOT, 'dist-bench', 'bench', script),
    ...args,
  ]);
  const child = spawn(command, commandArgs, { stdio: ['ignore', 'pipe', 'inherit'] });
  let text = '';
  let readyResolve: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    readyResolve = resolve;
  });
  child.stdout!.on('data', (chunk: Buffer) => {
    text += chunk.toString();
    if (text.includes('ready\n')) readyResolve();
  });
  return { child, output: () => text.replace(/^ready\n/, '').trim(), ready };
}

async function stopped(child: ChildProcess): Promise<void> {
  const closed = new Promise((resolve) => child.once('close', resolve));
  await stop(child);
  await closed;
}

async function json(base: string, method: string, route: string, token: string, body?: unknown) {
  const answer = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (answer.status >= 300)
    throw new Error(`${method} ${route} answered ${answer.status}: ${await answer.text()}`);
  return (await answer.json()) as Record<string, unknown>;
}

export async function benchWebhooks(inherited: NodeJS.ProcessEnv): Promise<number> {
  let failures = 0;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-webhooks-'));
  const env = {
    ...inherited,
    PLAYBOOK_DATA_DIR: dataDir,
    PLAYBOOK_RATE_LIMIT_MAX: '1000000000',
    PLAYBOOK_WEBHOOK_ALLOW_HTTP: 'true',
    PLAYBOOK_WEBHOOK_ALLOW_PRIVATE: 'true',
  };
  cli(
    [
      'import',
      writeTree(path.join(dataDir, 'tree'), { resources: 1000, slug: 'bench', contentChars: 500 }),
      '--owner',
      'svc',
    ],
    env,
  );
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const service = startService(port, env);
  const receiverPort = await freePort();
  const receiver = helper('webhook-receiver.js', [String(receiverPort)]);
  try {
    await waitForReady(`${base}/readyz`, service);
    await receiver.ready;
    const readKey = await createReadKey(base, env);
    const writerKey = await createReadKey(base, env, ['playbook:read', 'playbook:write'], 'writes');
    const made = await fetch(`${base}/v3/playbook/catalogs/org/writes`, {
      method: 'PUT',
      headers: { 'x-api-key': writerKey, 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'Written while others read',
        version: '1',
        resources: Array.from({ length: 10 }, (_, i) => ({
          slug: `doc-${i}`,
          kind: 'document',
          title: 'Doc',
          version: '0',
          mediaType: 'text/plain',
          content: '0',
        })),
      }),
    });
    if (made.status !== 201) throw new Error(`the writers' catalog answered ${made.status}`);
    const token = cli(['token', '--user', 'bench', '--account', 'writes'], env).trim();
    const endpoint = await json(base, 'POST', '/v3/identity/webhook-endpoints', token, {
      accountId: 'writes',
      url: `http://127.0.0.1:${receiverPort}/hooks`,
      events: ['resource.version_published'],
    });
    const setEndpoint = (status: 'enabled' | 'disabled') =>
      json(base, 'PATCH', `/v3/identity/webhook-endpoints/${String(endpoint.id)}`, token, { status });

    const list = (await (
      await fetch(`${base}/v3/playbook/catalogs/svc/bench/resources?pageSize=1`, {
        headers: { 'x-api-key': readKey },
      })
    ).json()) as { data: { id: string }[] };
    const detail = `${base}/v3/playbook/resources/${list.data[0]!.id}`;
    const load = { connections: CONNECTIONS, headers: { 'x-api-key': readKey } };
    wrk(detail, { ...load, seconds: 3 });

    const answered: Record<string, number> = {};
    const runs: Record<'on' | 'off' | 'none', LoadResult[]> = { on: [], off: [], none: [] };
    const writes: Record<'on' | 'off', number[]> = { on: [], off: [] };
    /** Writes for `seconds` while `during` runs (wrk, which blocks this thread, or nothing). */
    const writeFor = async (seconds: number, during: () => unknown) => {
      const writer = helper('change-writer.js', [base, writerKey, String(RATE)]);
      const started = performance.now();
      during();
      const left = seconds * 1000 - (performance.now() - started);
      if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
      await stopped(writer.child);
      return JSON.parse(writer.output()) as { answered: Record<string, number>; failed: number };
    };
    // 1. Commit to delivery, the service doing nothing else: the writes alone, the endpoint enabled.
    await setEndpoint('enabled');
    const alone = await writeFor(2 * DURATION_S, () => undefined);
    Object.assign(answered, alone.answered);
    // 2. Reads while the writes go on, with deliveries and without, in turns.
    const run = async (kind: 'on' | 'off' | 'none') => {
      if (kind === 'none') {
        runs.none.push(wrk(detail, { ...load, seconds: DURATION_S }));
        return;
      }
      await setEndpoint(kind === 'on' ? 'enabled' : 'disabled');
      const result = await writeFor(DURATION_S, () =>
        runs[kind].push(wrk(detail, { ...load, seconds: DURATION_S })),
      );
      writes[kind].push(Object.keys(result.answered).length / DURATION_S);
    };
    await run('none');
    for (let round = 0; round < ROUNDS; round++) {
      // Which goes first alternates, so that neither has the machine's better moments every time.
      for (const kind of round % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const))
        await run(kind);
    }
    // What was written with the endpoint enabled arrives within its retries: wait for the stragglers.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    await stopped(receiver.child);
    const { arrived, received } = JSON.parse(receiver.output()) as {
      arrived: Record<string, number>;
      received: number;
    };
    const latencies = Object.entries(answered)
      .filter(([id]) => arrived[id] !== undefined)
      .map(([id, at]) => arrived[id]! - at)
      .sort((a, b) => a - b);
    const missing = Object.keys(answered).length - latencies.length;
    const rps = (kind: 'on' | 'off' | 'none') => median(runs[kind].map((r) => r.rps));
    const p99 = (kind: 'on' | 'off' | 'none') => median(runs[kind].map((r) => r.p99Ms));
    const ratios = runs.on.map((on, i) => on.rps / runs.off[i]!.rps);
    const ratio = median(ratios);
    console.log(
      `webhooks (SQLite): ${RATE} changes/s to a local receiver, ${ROUNDS} rounds of ${DURATION_S} s with the endpoint enabled and disabled in turn`,
    );
    console.log(
      `  commit → delivery: p50 ${percentile(latencies, 50).toFixed(0)} ms, p99 ${percentile(latencies, 99).toFixed(0)} ms, max ${(latencies.at(-1) ?? Number.NaN).toFixed(0)} ms; ` +
        `${latencies.length} of ${Object.keys(answered).length} events delivered (${missing} missing; receiver got ${received} requests); ` +
        `${(Object.keys(alone.answered).length / (2 * DURATION_S)).toFixed(0)} writes/s answered, ${alone.failed} failed or not sent`,
    );
    console.log(
      `  detail reads: ${rps('on').toFixed(0)} req/s (p99 ${p99('on').toFixed(2)} ms) with deliveries, ${rps('off').toFixed(0)} req/s (p99 ${p99('off').toFixed(2)} ms) with the endpoint disabled, ` +
        `${rps('none').toFixed(0)} req/s with no writes; ratio with/without webhooks ${ratio.toFixed(2)}× (rounds: ${ratios.map((r) => r.toFixed(2)).join(', ')}); ` +
        `writes answered meanwhile: ${median(writes.on).toFixed(0)}/s with deliveries, ${median(writes.off).toFixed(0)}/s without`,
    );
    if (latencies.length === 0) {
      console.log('MISSED: no event was measured from commit to delivery');
      failures++;
    }
    if (missing > 0) {
      console.log(`MISSED: ${missing} events written with the endpoint enabled never arrived`);
      failures++;
    }
    if (ratio < MIN_READ_RATIO) {
      console.log(
        `MISSED: reads with deliveries at ${ratio.toFixed(2)}× of reads without (goal ≥ ${MIN_READ_RATIO}×)`,
      );
      failures++;
    }
    if (percentile(latencies, 99) > MAX_P99_MS) {
      console.log(`MISSED: delivery p99 above ${MAX_P99_MS} ms`);
      failures++;
    }

    // 3. The outbox's fan-out: the same import before and after 500 endpoints subscribe.
    const accounts = Array.from({ length: FAN_OUT_ACCOUNTS }, (_, i) => `fan-${i}`);
    const fanToken = cli(
      ['token', '--user', 'bench', ...accounts.flatMap((a) => ['--account', a])],
      env,
    ).trim();
    const timedImport = (slug: string) => {
      const tree = writeTree(path.join(dataDir, `fan-${slug}`), { resources: 100, slug, contentChars: 200 });
      const started = performance.now();
      cli(['import', tree, '--owner', 'svc'], env);
      return performance.now() - started;
    };
    // The service is stopped: nothing is delivered, the imports write what is due and no more.
    const beforeMs = await (async () => {
      for (const accountId of accounts) {
        for (let i = 0; i < FAN_OUT_PER_ACCOUNT; i++) {
          // Each endpoint is created and disabled at once: disabled endpoints take no deliveries.
          const created = await json(base, 'POST', '/v3/identity/webhook-endpoints', fanToken, {
            accountId,
            url: `http://127.0.0.1:${receiverPort}/fan`,
            events: ['*'],
          });
          await json(base, 'PATCH', `/v3/identity/webhook-endpoints/${String(created.id)}`, fanToken, {
            status: 'disabled',
          });
        }
      }
      await stop(service);
      return [timedImport('fan-none-a'), timedImport('fan-none-b')];
    })();
    // Enabled again while the service is down: written directly, as the test helpers do.
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(path.join(dataDir, 'playbook.sqlite'));
    db.prepare(`update webhook_endpoints set status = 'enabled' where account_id like 'fan-%'`).run();
    const afterMs = [timedImport('fan-500-a'), timedImport('fan-500-b')];
    const rows = (
      db
        .prepare(
          `select count(*) as n from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id where e.account_id like 'fan-%'`,
        )
        .get() as { n: number }
    ).n;
    db.close();
    const perImport = rows / afterMs.length;
    const extraMs = median(afterMs) - median(beforeMs);
    console.log(
      `  outbox fan-out: a 100-Resource service import (${(perImport / (FAN_OUT_ACCOUNTS * FAN_OUT_PER_ACCOUNT)).toFixed(0)} changes) takes ${median(beforeMs).toFixed(0)} ms with no endpoint and ${median(afterMs).toFixed(0)} ms ` +
        `with ${FAN_OUT_ACCOUNTS * FAN_OUT_PER_ACCOUNT} endpoints taking every type (${perImport.toFixed(0)} delivery rows in its transaction): ` +
        `${extraMs.toFixed(0)} ms more, ${((extraMs * 1000) / perImport).toFixed(1)} µs a row (process start included in both)`,
    );
  } finally {
    await stop(service);
    if (receiver.child.exitCode === null) await stop(receiver.child);
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  return failures;
}
