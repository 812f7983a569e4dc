import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { healthzUntil, npmStart, ROOT, type Started } from '../helpers/npm-start.js';
import { freePort } from '../helpers/servers.js';
import { sleep, waitFor } from '../helpers/wait.js';

describe('npm start (README)', () => {
  let dataDir: string;
  let started: Started;
  let metricsPort: number;
  /** A reader of the account the import test makes: the drain test holds a sync request with it. */
  let reader: Record<string, string> = {};
  beforeAll(async () => {
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-start-'));
    metricsPort = await freePort();
    started = await npmStart(dataDir, { PLAYBOOK_METRICS_PORT: String(metricsPort) });
  }, 120_000);
  afterAll(async () => {
    started?.child.kill('SIGKILL');
    await fs.rm(dataDir, { recursive: true, force: true });
  });

  it('serves the demo content on the embedded default', async () => {
    const health = await fetch(`${started.address}/healthz`);
    expect(health.status).toBe(200);
    const catalogs = await fetch(`${started.address}/v3/playbook/catalogs`);
    // Served, and asking for a credential: the API is up behind its authentication.
    expect(catalogs.status).toBe(401);
    expect(catalogs.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  });

  it("prints the console's address right after the API's, and serves the console there (D33)", async () => {
    const lines = started.stderr().split('\n');
    const serving = lines.findIndex((line) => line.includes(`is serving on ${started.address}`));
    expect(lines[serving + 1]).toBe(`Console: ${started.address}/console`);
    const page = await fetch(`${started.address}/console`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await page.text()).toContain('<meta name="playbook-console"');
  });

  it('prints first steps that work as printed: a key made by the command line reads the demo Catalogs', async () => {
    const lines = started.stderr().split('\n');
    const first = lines.findIndex((line) => line.startsWith('First steps'));
    expect(first).toBeGreaterThan(-1);
    const commands = lines
      .slice(first + 1)
      .filter((line) => line.startsWith('  '))
      .map((line) => line.trim());
    expect(commands).toHaveLength(2);
    const { stdout } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', commands.join('\n')], {
      cwd: ROOT,
      env: { ...process.env, PLAYBOOK_DATA_DIR: dataDir },
    });
    const answer = JSON.parse(stdout) as { data: { humanRef: string }[]; meta: { total: number } };
    expect(answer.meta.total).toBe(4);
    expect(answer.data.map((catalog) => catalog.humanRef)).toContain('svc/incident-response');
    // Two processes start here (npx, then the command line), as many as a second terminal would.
  }, 60_000);

  it('with PLAYBOOK_METRICS_PORT, serves the metrics on that port of loopback, counting from the first request (D25)', async () => {
    const metrics = `http://127.0.0.1:${metricsPort}/metrics`;
    expect(started.stderr()).toContain(`Metrics for Prometheus: ${metrics}`);
    const before = await (await fetch(metrics)).text();
    expect((await fetch(`${started.address}/healthz`)).status).toBe(200);
    const after = await (await fetch(metrics)).text();
    const healthz = (text: string) =>
      Number(
        /^playbook_http_requests_total\{operation="\/healthz",method="GET",status="200"\} (\d+)$/m.exec(
          text,
        )?.[1] ?? 0,
      );
    expect(healthz(after) - healthz(before)).toBe(1);
    expect((await fetch(`${started.address}/metrics`)).status).toBe(404);
  });

  it('a playbook import run as another process on the same data directory shows in the served answers within a second (D26)', async () => {
    const run = promisify(execFile);
    const cli = (...args: string[]) =>
      run(process.execPath, [path.join(ROOT, 'dist/cli/main.js'), ...args], {
        env: { ...process.env, PLAYBOOK_DATA_DIR: dataDir, LOG_LEVEL: 'silent' },
      });
    const token = (await cli('token', '--user', 'ada', '--account', 'mirror')).stdout.trim();
    const created = await fetch(`${started.address}/v3/identity/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'two processes', accountId: 'mirror', scopes: ['playbook:read'] }),
    });
    expect(created.status).toBe(201);
    const headers = { 'x-api-key': ((await created.json()) as { key: string }).key };
    reader = headers;
    const slugs = async () => {
      const answer = await fetch(`${started.address}/v3/playbook/catalogs?sourceScope=account`, { headers });
      expect(answer.status).toBe(200);
      return ((await answer.json()) as { data: { slug: string }[] }).data.map((catalog) => catalog.slug);
    };
    // Read twice: the answer is held in memory when the other process writes.
    expect(await slugs()).toEqual([]);
    expect(await slugs()).toEqual([]);

    const tree = path.join(dataDir, 'second-process');
    await fs.mkdir(path.join(tree, 'runbooks', 'resources'), { recursive: true });
    await fs.writeFile(
      path.join(tree, 'runbooks', 'catalog.json'),
      JSON.stringify({ name: 'Runbooks', version: '1' }),
    );
    await fs.writeFile(
      path.join(tree, 'runbooks', 'resources', 'deploy.json'),
      JSON.stringify({
        kind: 'document',
        title: 'Deploy',
        version: '1',
        mediaType: 'text/markdown',
        content: '# Deploy',
      }),
    );
    await cli('import', tree, '--account', 'mirror');
    const committed = Date.now();
    let seen: string[] = [];
    while (Date.now() - committed < 3000) {
      seen = await slugs();
      if (seen.length > 0) break;
      await sleep(50);
    }
    expect(seen).toEqual(['runbooks']);
    expect(Date.now() - committed).toBeLessThan(1000);
  });

  it('stops on a SIGTERM sent to the npm process: drains, logs it, exits 0 and leaves no server behind', async () => {
    // A sync request held for a minute (D27) is answered at once, empty, and does not hold the stop up.
    type Position = { nextPageToken?: string; nextSyncToken?: string };
    let position = (await (
      await fetch(`${started.address}/v3/playbook/sync`, { headers: reader })
    ).json()) as Position;
    while (position.nextPageToken) {
      const url = `${started.address}/v3/playbook/sync?pageToken=${position.nextPageToken}`;
      position = (await (await fetch(url, { headers: reader })).json()) as Position;
    }
    const syncToken = position.nextSyncToken as string;
    const held = fetch(`${started.address}/v3/playbook/sync?syncToken=${syncToken}&wait=60`, {
      headers: reader,
    });
    // Signalled once the server holds it, as its gauge says: a request still on its way when the
    // listener closes would find no server.
    const metrics = `http://127.0.0.1:${metricsPort}/metrics`;
    await waitFor(
      'the sync request held',
      async () => /^playbook_sync_held_requests 1$/m.test(await (await fetch(metrics)).text()),
      5000,
    );
    const signalledAt = Date.now();
    started.child.kill('SIGTERM');
    const answer = await held;
    expect(answer.status).toBe(200);
    expect(await answer.json()).toEqual({ data: [], nextSyncToken: syncToken });
    const { code } = await started.exited;
    expect(Date.now() - signalledAt).toBeLessThan(5000);
    expect(code).toBe(0);
    // The server process itself is gone, not orphaned and still listening, and so is its metrics listener.
    await expect(fetch(`${started.address}/healthz`)).rejects.toThrow();
    await expect(fetch(`http://127.0.0.1:${metricsPort}/metrics`)).rejects.toThrow();
    const messages = started
      .stdout()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(messages).toEqual(expect.arrayContaining(['draining in-flight requests', 'stopped']));
    expect(messages.at(-1)).toBe('stopped');
  });
});

describe('npm start stopping behind a load balancer (D31)', () => {
  it('on SIGTERM fails /readyz at once, serves on for PLAYBOOK_SHUTDOWN_DELAY_MS, then drains and exits 0; a second signal does not cut it short', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'playbook-stop-'));
    const delayMs = 1500;
    const started = await npmStart(dataDir, { PLAYBOOK_SHUTDOWN_DELAY_MS: String(delayMs) });
    try {
      const ready = await fetch(`${started.address}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({ status: 'ready', checks: { database: 'ok' } });

      started.child.kill('SIGTERM');
      const signalledAt = Date.now();
      // /readyz fails first, as soon as the signal is handled…
      let readyz = 200;
      while (readyz === 200 && Date.now() - signalledAt < delayMs) {
        readyz = (await fetch(`${started.address}/readyz`)).status;
      }
      expect(readyz).toBe(503);
      const draining = await fetch(`${started.address}/readyz`);
      expect(await draining.json()).toMatchObject({ status: 'draining' });
      // …while new connections are still accepted and answered, for the whole delay.
      setTimeout(() => started.child.kill('SIGTERM'), 100);
      const served = await healthzUntil(started.address, signalledAt + delayMs - 300);
      expect(served.length).toBeGreaterThan(5);
      expect(served.every((status) => status === 200)).toBe(true);

      const { code } = await started.exited;
      expect(code).toBe(0);
      expect(Date.now() - signalledAt).toBeGreaterThanOrEqual(delayMs);
      await expect(fetch(`${started.address}/healthz`)).rejects.toThrow();
      const lines = started
        .stdout()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { msg: string; client?: string });
      const messages = lines.map((line) => line.msg);
      const stopping = messages.indexOf('stopping: /readyz fails; serving on for the shutdown delay');
      expect(stopping).toBeGreaterThanOrEqual(0);
      expect(messages.indexOf('draining in-flight requests')).toBeGreaterThan(stopping);
      expect(messages.filter((message) => message === 'draining in-flight requests')).toHaveLength(1);
      expect(messages.at(-1)).toBe('stopped');
      // The access line names the client (D31).
      expect(lines.find((line) => line.msg === 'request')?.client).toBe('127.0.0.1');
    } finally {
      started.child.kill('SIGKILL');
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('the build behind npm start', () => {
  it('does no work again when nothing changed: after `npm ci` built it, `npm start` compiles nothing', async () => {
    const run = promisify(execFile);
    // `npm ci` builds through `prepare`; `npm start` builds again through `prestart`. Incremental
    // builds make the second one a check that writes nothing.
    await run('npm', ['run', 'build'], { cwd: ROOT });
    const outputs = [
      'dist/cli/main.js',
      'dist/composition/app.js',
      'clients/typescript/dist/esm/index.js',
      'clients/typescript/dist/cjs/index.js',
    ].map((file) => path.join(ROOT, file));
    const before = await Promise.all(outputs.map(async (file) => (await fs.stat(file)).mtimeMs));
    await run('npm', ['run', 'build'], { cwd: ROOT });
    const after = await Promise.all(outputs.map(async (file) => (await fs.stat(file)).mtimeMs));
    expect(after).toEqual(before);
  }, 120_000);
});
