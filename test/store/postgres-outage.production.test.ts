import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/composition/app.js';
import { createServices, type Services } from '../../src/composition/services.js';
import { DatabaseContentStore } from '../../src/content/database-store.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import { loadConfig } from '../../src/foundation/config.js';
import { unlimited } from '../helpers/app.js';
import { type PostgresServer, startPostgresWithDatabase } from '../helpers/servers.js';
import { sleep } from '../helpers/wait.js';
import { anyReader, seedCatalog, seedResource, type Timed, timedGet } from './support.js';

/**
 * D18 and issue 4: PostgreSQL stopped under a trickle of requests. Every answer comes within a bound;
 * while the database is down the answers are 503 problem documents and `/readyz` is 503; once it is
 * started again the same app, never rebuilt, answers 200 and `/readyz` 200 by itself.
 *
 * The cluster is this test's own, so that stopping it disturbs no other suite.
 */

const ANSWER_BOUND_MS = 6000;
const TRICKLE_EVERY_MS = 100;

type Phase = 'up' | 'stopping' | 'down' | 'restarting' | 'recovered';

interface Answer extends Timed {
  readonly phase: Phase;
}

describe('a PostgreSQL outage', () => {
  let server: PostgresServer;
  let services: Services;
  let app: FastifyInstance;
  let base: string;
  let dataDir: string;
  const resourceIds: string[] = [];

  beforeAll(async () => {
    ({ server } = await startPostgresWithDatabase());
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-outage-'));
    const config = loadConfig({
      PLAYBOOK_DATA_DIR: dataDir,
      PLAYBOOK_DATABASE_URL: server.urlFor('playbook'),
      // Every read goes to the database: the outage is what this test is about. (Answers kept in
      // memory would go on being served, rightly: nothing can change them while the database is down.)
      PLAYBOOK_ANSWER_CACHE_BYTES: '0',
      LOG_LEVEL: 'silent',
    });
    // The real composition root: its pools, timeouts and readiness checks are what is under test.
    services = createServices(config, pino({ level: 'silent' }));
    await migrateToLatest(services.databases);
    const db = services.databases.primary;
    const catalogId = await seedCatalog(db, 'handbook');
    const store = new DatabaseContentStore(db);
    for (let i = 0; i < 5; i++) {
      resourceIds.push(await seedResource(db, catalogId, store, `page-${i}`, `# Page ${i}\n`));
    }
    app = await buildApp({
      reads: services.reads,
      authenticator: anyReader,
      rateLimits: unlimited,
      readiness: services.readiness,
    });
    base = await app.listen({ port: 0, host: '127.0.0.1' });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await services?.close();
    await server?.destroy();
    if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
  });

  it('gives 503 problem documents and a failing /readyz, then recovers by itself', async () => {
    const answers: Answer[] = [];
    const readiness: Answer[] = [];
    let phase: Phase = 'up';
    let trickling = true;
    const urls = [
      '/v3/playbook/catalogs/svc/handbook/resources',
      ...resourceIds.map((id) => `/v3/playbook/resources/${id}`),
      '/v3/playbook/catalogs',
    ];

    // Requests start on a fixed beat and do not wait for each other, as traffic would not.
    const trickle = (async () => {
      const inFlight: Promise<void>[] = [];
      for (let i = 0; trickling; i++) {
        const startedIn = phase;
        const url = urls[i % urls.length]!;
        inFlight.push(
          timedGet(base, url).then((answer) => void answers.push({ ...answer, phase: startedIn })),
        );
        await sleep(TRICKLE_EVERY_MS);
      }
      await Promise.all(inFlight);
    })();
    const ready = async () => {
      const startedIn = phase;
      const answer = await timedGet(base, '/readyz');
      readiness.push({ ...answer, phase: startedIn });
      return answer;
    };

    await sleep(1000);
    expect((await ready()).status).toBe(200);

    phase = 'stopping';
    await server.stop();
    phase = 'down';
    await sleep(3000);
    const downReady = await ready();

    phase = 'restarting';
    await server.start();
    // The pool opens new connections on demand; give it a moment, never a rebuild.
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline && (await timedGet(base, urls[0]!)).status !== 200) await sleep(200);
    phase = 'recovered';
    await sleep(1000);
    const recoveredReady = await ready();
    trickling = false;
    await trickle;

    const summary = answers.map((a) => `${a.phase} ${a.status} ${Math.round(a.ms)}ms ${a.url}`).join('\n');
    // No answer hangs, whatever the phase, and none is anything but a success or "unavailable".
    expect(
      answers.filter((a) => a.ms > ANSWER_BOUND_MS || a.status === 0),
      summary,
    ).toEqual([]);
    expect(
      answers.filter((a) => a.status !== 200 && a.status !== 503),
      summary,
    ).toEqual([]);

    const up = answers.filter((a) => a.phase === 'up');
    const down = answers.filter((a) => a.phase === 'down');
    const recovered = answers.filter((a) => a.phase === 'recovered');
    expect(up.length, summary).toBeGreaterThanOrEqual(5);
    expect(
      up.every((a) => a.status === 200),
      summary,
    ).toBe(true);
    expect(down.length, summary).toBeGreaterThanOrEqual(15);
    for (const answer of down) {
      expect(answer.status, summary).toBe(503);
      expect(answer.contentType).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(answer.body)).toMatchObject({ status: 503, code: 'unavailable' });
    }
    expect(recovered.length, summary).toBeGreaterThanOrEqual(5);
    expect(
      recovered.every((a) => a.status === 200),
      summary,
    ).toBe(true);

    expect(downReady.status).toBe(503);
    expect(JSON.parse(downReady.body)).toMatchObject({
      status: 'unavailable',
      checks: { database: 'unavailable' },
    });
    expect(recoveredReady.status).toBe(200);
    expect(JSON.parse(recoveredReady.body)).toMatchObject({ status: 'ready', checks: { database: 'ok' } });
    expect(readiness.every((a) => a.ms < ANSWER_BOUND_MS)).toBe(true);
  }, 60_000);
});
