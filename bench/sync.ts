/**
 * What the sync feed costs (D27), beside `npm run bench`'s reads against the floor (run.ts holds the
 * empty poll):
 *
 * - Held requests: a fresh service, started as `npm start` starts it, holds 1,000 sync requests with
 *   `wait` of one key (its room and that key's share raised to hold them all): the resident memory
 *   they add, and how soon all of them are answered once a change of their account commits.
 * - An initial sync of a Catalog of 100,000 Resources (BENCH_SYNC_RESOURCES): every page walked by
 *   one follower, from a fresh service over an imported tree; its time, bytes, and the service's peak
 *   RSS while it ran (reset before the walk, through /proc/<pid>/clear_refs).
 */

import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import {
  cli,
  createReadKey,
  freePort,
  peakRssMb,
  startService,
  stop,
  waitForReady,
  writeTree,
} from './support.js';

const HELD = Number(process.env.BENCH_SYNC_HELD ?? 1000);
const RESOURCES = Number(process.env.BENCH_SYNC_RESOURCES ?? 100_000);
/** D30: a serving instance stays under this, under load; an initial sync is load. */
const MAX_SERVE_RSS_MB = 250;
const WAKE_WITHIN_MS = 1000;

interface Got {
  readonly status: number;
  readonly body: string;
  readonly bytes: number;
}

/** A GET without Accept-Encoding (the identity form's bytes), on a connection of its own. */
function get(url: string, headers: Record<string, string>, agent?: http.Agent): Promise<Got> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers, ...(agent ? { agent } : {}) }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const body = Buffer.concat(chunks);
          resolve({ status: response.statusCode ?? 0, body: body.toString('utf8'), bytes: body.length });
        });
        response.on('error', reject);
      })
      .on('error', reject);
  });
}

/** The process's resident memory now (VmRSS), in MB. */
function rssMb(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

/** Starts the peak RSS (VmHWM) over from what the process holds now; false where the kernel does not let it. */
function resetPeak(pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Walks one whole sync; returns its final position, pages and bytes. */
async function syncToEnd(
  base: string,
  headers: Record<string, string>,
  syncToken?: string,
): Promise<{ syncToken: string; pages: number; bytes: number; items: number }> {
  let query = syncToken === undefined ? '' : `syncToken=${syncToken}`;
  let pages = 0;
  let bytes = 0;
  let items = 0;
  for (;;) {
    const answer = await get(`${base}/v3/playbook/sync?pageSize=100${query ? `&${query}` : ''}`, headers);
    if (answer.status !== 200)
      throw new Error(`a sync page answered ${answer.status}: ${answer.body.slice(0, 300)}`);
    const page = JSON.parse(answer.body) as {
      data: unknown[];
      nextPageToken?: string;
      nextSyncToken?: string;
    };
    pages++;
    bytes += answer.bytes;
    items += page.data.length;
    if (page.nextSyncToken !== undefined) return { syncToken: page.nextSyncToken, pages, bytes, items };
    query = `pageToken=${page.nextPageToken}`;
  }
}

/** The current position of `headers`' caller: what an empty poll asks with. */
export async function currentPosition(base: string, headers: Record<string, string>): Promise<string> {
  return (await syncToEnd(base, headers)).syncToken;
}

async function metric(metricsUrl: string, name: string): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  const match = new RegExp(`^${name}\\s+([0-9.e+-]+)$`, 'm').exec(text);
  return match ? Number(match[1]) : Number.NaN;
}

/** 1,000 held sync requests on one instance: the memory they add, and how soon a change answers them. */
export async function benchHeldRequests(env: NodeJS.ProcessEnv, dataDir: string): Promise<number> {
  let failures = 0;
  const port = await freePort();
  const metricsPort = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  const service = startService(port, {
    ...env,
    PLAYBOOK_DATA_DIR: dataDir,
    PLAYBOOK_METRICS_PORT: String(metricsPort),
    // One key's share is the whole of what is measured: its own share, and its account's, a tenth of
    // the instance's room (D27).
    PLAYBOOK_SYNC_MAX_WAITERS: String(HELD * 10),
    PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY: String(HELD),
  });
  const agent = new http.Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY });
  try {
    await waitForReady(`${base}/readyz`, service);
    const writer = await createReadKey(base, { ...env, PLAYBOOK_DATA_DIR: dataDir }, [
      'playbook:read',
      'playbook:write',
    ]);
    const headers = { 'x-api-key': writer };
    const syncToken = await currentPosition(base, headers);
    // Settled: the first requests' allocations, and a few polls from memory.
    for (let i = 0; i < 200; i++) await get(`${base}/v3/playbook/sync?syncToken=${syncToken}`, headers);
    await sleep(1000);
    const before = rssMb(service.pid!);
    const answers = Array.from({ length: HELD }, () =>
      get(`${base}/v3/playbook/sync?syncToken=${syncToken}&wait=60`, headers, agent).then((got) => ({
        ...got,
        at: performance.now(),
      })),
    );
    for (let i = 0; (await metric(metricsUrl, 'playbook_sync_held_requests')) < HELD; i++) {
      if (i > 600) throw new Error('the requests were not all held within a minute');
      await sleep(100);
    }
    await sleep(1000);
    const held = rssMb(service.pid!);
    const added = held - before;
    console.log(
      `  ${HELD} held sync requests: RSS ${before.toFixed(0)} MB before, ${held.toFixed(0)} MB while held: ` +
        `${added.toFixed(1)} MB added, ${((added * 1024) / HELD).toFixed(1)} KB each (sockets, requests and timers included)`,
    );
    const refused = await get(`${base}/v3/playbook/sync?syncToken=${syncToken}&wait=60`, headers);
    if (refused.status !== 429) {
      console.log(`  MISSED: one more than the key's ${HELD} held answered ${refused.status}, not 429`);
      failures++;
    }
    // From the moment the write is sent: its commit, and each held request's wake, come inside that
    // time (the held requests are often answered before the write's own answer arrives).
    const sentAt = performance.now();
    const written = await fetch(`${base}/v3/playbook/catalogs/org/held-bench`, {
      method: 'PUT',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'Held',
        version: '1',
        resources: [
          {
            slug: 'one',
            kind: 'document',
            title: 'One',
            version: '1',
            mediaType: 'text/plain',
            content: '1',
          },
        ],
      }),
    });
    const writeMs = performance.now() - sentAt;
    if (written.status !== 201) throw new Error(`the change answered ${written.status}`);
    const results = await Promise.all(answers);
    const times = results.map((result) => result.at - sentAt).sort((a, b) => a - b);
    const woken = results.filter(
      (result) => result.status === 200 && result.body.includes('held-bench'),
    ).length;
    const last = times.at(-1)!;
    const ok = woken === HELD && last <= WAKE_WITHIN_MS;
    if (!ok) failures++;
    console.log(
      `  one change answers them: ${woken}/${HELD} with it; after the write was sent (its commit comes inside ` +
        `that time; the write's own answer came after ${writeMs.toFixed(0)} ms): first ${times[0]!.toFixed(0)} ms, ` +
        `median ${times[Math.floor(times.length / 2)]!.toFixed(0)} ms, last ${last.toFixed(0)} ms ` +
        `(target all ≤ ${WAKE_WITHIN_MS} ms)  ${ok ? 'ok' : 'MISSED'}`,
    );
  } finally {
    agent.destroy();
    await stop(service);
  }
  return failures;
}

/** An initial sync of a Catalog of 100,000 Resources, walked by one follower: time, bytes, peak RSS. */
export async function benchInitialSync(env: NodeJS.ProcessEnv): Promise<number> {
  let failures = 0;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'playbook-bench-sync-'));
  const scoped = { ...env, PLAYBOOK_DATA_DIR: dataDir };
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let service: ReturnType<typeof startService> | undefined;
  try {
    const tree = writeTree(path.join(dataDir, 'tree'), {
      resources: RESOURCES,
      slug: 'large',
      contentChars: 500,
    });
    const importStarted = performance.now();
    cli(['import', tree, '--owner', 'svc'], scoped);
    fs.rmSync(tree, { recursive: true, force: true });
    console.log(
      `  imported ${RESOURCES} resources in ${((performance.now() - importStarted) / 1000).toFixed(0)} s`,
    );
    service = startService(port, scoped);
    await waitForReady(`${base}/readyz`, service);
    const headers = { 'x-api-key': await createReadKey(base, scoped) };
    await sleep(1000);
    const before = rssMb(service.pid!);
    const reset = resetPeak(service.pid!);
    const started = performance.now();
    const walked = await syncToEnd(base, headers);
    const seconds = (performance.now() - started) / 1000;
    const peak = peakRssMb(service.pid!);
    const ok = walked.items === RESOURCES + 1 && peak <= MAX_SERVE_RSS_MB;
    if (!ok) failures++;
    console.log(
      `  initial sync of ${walked.items} items (1 Catalog, ${RESOURCES} Resources): ${walked.pages} pages, ` +
        `${(walked.bytes / 1e6).toFixed(1)} MB, ${seconds.toFixed(1)} s (${(walked.pages / seconds).toFixed(0)} pages/s)`,
    );
    console.log(
      `  service RSS ${before.toFixed(0)} MB before; peak ${peak.toFixed(0)} MB during the sync` +
        `${reset ? '' : ' (peak since start: the kernel would not reset it)'} (target ≤ ${MAX_SERVE_RSS_MB} MB)  ${ok ? 'ok' : 'MISSED'}`,
    );
  } finally {
    if (service) await stop(service);
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  return failures;
}
