import { spawn } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenAccount } from '../helpers/fixtures.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { timedUses, usesOf } from '../helpers/timed-uses.js';
import { waitFor } from '../helpers/wait.js';
import { type Instance, outageWarnings, recoveryLines, startInstance } from '../multi-instance/support.js';

/**
 * D31 on S3: the object store out of one instance's reach. Lists and answers held go on being served,
 * content not held answers 503; the instance says so in one line each way and its gauge follows; it
 * stays ready (degraded), since it serves what it holds. A bucket that does not exist is said at start.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const CATALOG = '/v3/playbook/catalogs/org/handbook';

describe('the content store out of reach (D31)', () => {
  let backend: TestBackend;
  let relay: TcpProxy;
  let instance: Instance;
  let headers: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    await givenAccount(backend.databases.primary, 'acme');
    relay = await startTcpProxy({
      host: '127.0.0.1',
      port: Number(new URL(backend.env.PLAYBOOK_S3_ENDPOINT!).port),
    });
    instance = await startInstance('A', backend, {
      env: { PLAYBOOK_S3_ENDPOINT: relay.via(backend.env.PLAYBOOK_S3_ENDPOINT!).replace(/\/$/, '') },
    });
    const created = await instance.services.identity.keys.createFor(
      { subject: 'ada', accounts: ['acme'] },
      { name: 'writer', accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] },
    );
    headers = { 'x-api-key': created.key };
    // Content above 64 KiB goes to object storage (D15).
    const large = 'x'.repeat(70 * 1024);
    const published = await instance.app.inject({
      method: 'PUT',
      url: CATALOG,
      headers,
      payload: {
        name: 'Handbook',
        version: '1',
        resources: [
          publishedResource('held', { content: large }),
          publishedResource('cold', { content: `${large}!` }),
        ],
      },
    });
    expect(published.statusCode, published.body).toBe(201);
  }, 60_000);

  afterAll(async () => {
    await instance?.close();
    await relay?.close();
    await backend?.cleanup();
  });

  it('serves lists and what it holds, 503 for content it does not, and says so once each way', async () => {
    const list = await instance.app.inject({ url: `${CATALOG}/resources`, headers });
    expect(list.statusCode).toBe(200);
    const ids = Object.fromEntries(
      (list.json() as { data: { slug: string; id: string }[] }).data.map((item) => [item.slug, item.id]),
    );
    const detail = (slug: string) =>
      instance.app.inject({ url: `/v3/playbook/resources/${ids[slug]}`, headers });
    expect((await detail('held')).statusCode).toBe(200);
    const gauge = async () =>
      /playbook_dependency_up\{dependency="contentStore"\} (\d)/.exec(
        await instance.services.metrics.registry.getSingleMetricAsString('playbook_dependency_up'),
      )?.[1];
    expect(await gauge()).toBe('1');
    /** The object store's uses timed as `operation outcome`: how many, and their seconds in all. */
    const objectStoreUses = () =>
      timedUses(
        instance.services.metrics.contentStoreDuration,
        ['operation', 'outcome'],
        (labels) => labels.backend === 'object-storage',
      );
    const usesBefore = await objectStoreUses();

    await relay.cut();
    const outageStart = instance.logs.length;
    for (let i = 0; i < 5; i++) {
      const cold = await detail('cold');
      expect(cold.statusCode).toBe(503);
      expect(cold.json()).toMatchObject({ code: 'unavailable' });
      expect(Number(cold.headers['retry-after'])).toBeGreaterThan(0);
      expect((await detail('held')).statusCode).toBe(200);
      expect((await instance.app.inject({ url: `${CATALOG}/resources`, headers })).statusCode).toBe(200);
    }
    expect(instance.services.dependencies.contentStore.isUp).toBe(false);
    expect(await gauge()).toBe('0');
    const ready = await instance.app.inject({ url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toMatchObject({ status: 'degraded', checks: { contentStore: 'unavailable' } });
    expect((await instance.app.inject({ url: '/readyz?strict=true' })).statusCode).toBe(503);
    // D31: each read that could not reach the store counts as a failed use, with the time it took.
    const usesDuring = await objectStoreUses();
    const failedBefore = usesOf(usesBefore, 'get error');
    const failedDuring = usesOf(usesDuring, 'get error');
    expect(failedDuring.count - failedBefore.count).toBe(5);
    expect(failedDuring.seconds).toBeGreaterThan(failedBefore.seconds);
    // One line for the outage, however many requests met it: each 503 has its access line, and no
    // error line or stack trace of its own.
    const duringOutage = instance.logs.slice(outageStart);
    expect(
      duringOutage
        .filter((line) => line.msg === 'request' && line.url === `/v3/playbook/resources/${ids.cold}`)
        .map((line) => [line.status, line.code]),
    ).toEqual(Array(5).fill([503, 'unavailable']));
    expect(duringOutage.filter((line) => line.level >= 40).map((line) => line.msg)).toEqual([
      outageWarnings(instance.logs, 'contentStore')[0]?.msg,
    ]);
    expect(duringOutage.filter((line) => JSON.stringify(line).includes('"stack"'))).toEqual([]);

    await relay.restore();
    await waitFor('the cold content served again', async () => (await detail('cold')).statusCode === 200);
    expect(await gauge()).toBe('1');
    expect(outageWarnings(instance.logs, 'contentStore')).toHaveLength(1);
    expect(outageWarnings(instance.logs, 'contentStore')[0]?.msg).toMatch(/content not held answers 503/);
    expect(recoveryLines(instance.logs, 'contentStore')).toHaveLength(1);
    expect(instance.logs.filter((line) => line.msg === 'request failed')).toEqual([]);
  }, 60_000);

  it('says at start, in one line naming the bucket, that the bucket does not exist', async () => {
    const env = {
      ...process.env,
      ...backend.env,
      PLAYBOOK_CONTENT_STORE: 's3://no-such-bucket-for-playbook/x',
      PORT: '0',
      LOG_LEVEL: 'info',
    };
    const child = spawn(process.execPath, [path.join(ROOT, 'dist/cli/main.js'), 'serve'], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    try {
      await waitFor(
        'the bucket line',
        async () => stdout.includes('the content store cannot be used'),
        30_000,
      );
      const line = stdout
        .split('\n')
        .filter((text) => text.startsWith('{'))
        .map(
          (text) =>
            JSON.parse(text) as { level: number; msg: string; reason?: string; contentStore?: string },
        )
        .find((entry) => entry.msg.startsWith('the content store cannot be used'));
      expect(line).toMatchObject({
        level: 50,
        contentStore: 's3://no-such-bucket-for-playbook/x',
        reason: 'the bucket "no-such-bucket-for-playbook" does not exist',
      });
      expect(JSON.stringify(line)).not.toContain('stack');
    } finally {
      child.kill('SIGKILL');
    }
  }, 60_000);
});
