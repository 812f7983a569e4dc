import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { MemoryRateCounter } from '../../src/auth/rate-limits.js';
import { DependencyHealth } from '../../src/observability/dependency-health.js';
import { Metrics } from '../../src/observability/metrics.js';
import { closeRedis, createRedisClient, RedisHealth } from '../../src/redis/redis-connection.js';
import { FallbackRateCounter, RedisRateCounter } from '../../src/redis/redis-rate-counter.js';
import { freePort, type ProductionServers, startRedis } from '../helpers/servers.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { capturingLogger, outageWarnings, recoveryLines } from './support.js';

/**
 * The Redis rate counter's script against a real redis-server (D10): fixed windows opened by the
 * first hit, counts shared by every connection, and the per-instance fallback when Redis does not
 * answer. Every test uses a prefix of its own, since the test Redis is shared by the whole run.
 */

const servers: ProductionServers | undefined = inject('playbookServers');

describe('RedisRateCounter', () => {
  const clients: Redis[] = [];
  let admin: Redis;
  const connect = () => {
    const client = createRedisClient(servers!.redisUrl, { connectionName: 'playbook-test' });
    clients.push(client);
    return client;
  };
  const freshPrefix = () => `playbook-test:${randomBytes(4).toString('hex')}:rl:`;
  const ready = (client: Redis) =>
    waitFor('the Redis connection', async () => client.status === 'ready', 5000);

  beforeAll(async () => {
    admin = connect();
    await ready(admin);
  });
  afterAll(async () => {
    await Promise.all(clients.map((client) => closeRedis(client)));
  });

  it('counts hits in one window, opened by the first hit and never stretched by later ones', async () => {
    const prefix = freshPrefix();
    const counter = new RedisRateCounter(admin, prefix);
    const first = await counter.increment('key:a', 10_000);
    expect(first.count).toBe(1);
    expect(first.resetInMs).toBeGreaterThan(9_000);
    expect(first.resetInMs).toBeLessThanOrEqual(10_000);
    await sleep(50);
    const second = await counter.increment('key:a', 10_000);
    expect(second.count).toBe(2);
    expect(second.resetInMs).toBeLessThanOrEqual(first.resetInMs - 40);
    // Other keys have windows of their own.
    expect((await counter.increment('key:b', 10_000)).count).toBe(1);
  });

  it('starts again from one once a short window has passed', async () => {
    const counter = new RedisRateCounter(admin, freshPrefix());
    let third = { count: 0, resetInMs: 0 };
    for (const expected of [1, 2, 3]) {
      third = await counter.increment('key:short', 300);
      expect(third.count).toBe(expected);
    }
    expect(third.resetInMs).toBeGreaterThan(0);
    await sleep(third.resetInMs + 50);
    const again = await counter.increment('key:short', 300);
    expect(again.count).toBe(1);
    expect(again.resetInMs).toBeGreaterThan(200);
  });

  it('keeps its counts under its prefix, each with an expiry', async () => {
    const prefix = freshPrefix();
    const counter = new RedisRateCounter(admin, prefix);
    await counter.increment('key:abc', 60_000);
    await counter.increment('user:ada', 60_000);
    const keys = (await admin.keys(`${prefix}*`)).sort();
    expect(keys).toEqual([`${prefix}key:abc`, `${prefix}user:ada`]);
    for (const key of keys) {
      const ttl = await admin.pttl(key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(60_000);
    }
  });

  it('is atomic across connections: concurrent hits from two instances each get their own count', async () => {
    const prefix = freshPrefix();
    const [one, two] = [connect(), connect()];
    await Promise.all([ready(one), ready(two)]);
    const counters = [new RedisRateCounter(one, prefix), new RedisRateCounter(two, prefix)];
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => counters[i % 2]!.increment('key:busy', 60_000)),
    );
    expect(results.map((result) => result.count).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    expect(await admin.get(`${prefix}key:busy`)).toBe('200');
  });

  it('gives an expiry to a count that has none, rather than keep it for ever', async () => {
    const prefix = freshPrefix();
    await admin.set(`${prefix}key:stuck`, '7');
    const counter = new RedisRateCounter(admin, prefix);
    const hit = await counter.increment('key:stuck', 1_000);
    expect(hit).toEqual({ count: 8, resetInMs: 1_000 });
    expect(await admin.pttl(`${prefix}key:stuck`)).toBeGreaterThan(0);
  });

  it('loads its scripts again after Redis forgot them (as after a restart)', async () => {
    const counter = new RedisRateCounter(admin, freshPrefix());
    expect((await counter.increment('key:flush', 60_000)).count).toBe(1);
    await admin.script('FLUSH');
    expect((await counter.increment('key:flush', 60_000)).count).toBe(2);
  });
});

describe('FallbackRateCounter', () => {
  const health = (logger: ReturnType<typeof capturingLogger>['logger']) =>
    new RedisHealth(new DependencyHealth('redis', logger, new Metrics(), 'counted locally'), 'rate-limits');

  it('counts in Redis while it answers', async () => {
    const { logger, lines } = capturingLogger();
    const redis = createRedisClient(servers!.redisUrl, { connectionName: 'playbook-test' });
    const watch = health(logger);
    watch.watch(redis);
    try {
      await waitFor('the Redis connection', async () => redis.status === 'ready', 5000);
      const prefix = `playbook-test:${randomBytes(4).toString('hex')}:rl:`;
      const counter = new FallbackRateCounter({
        shared: new RedisRateCounter(redis, prefix),
        local: new MemoryRateCounter(),
        connected: () => redis.status === 'ready',
        health: watch,
      });
      for (const expected of [1, 2, 3])
        expect((await counter.increment('key:k', 60_000)).count).toBe(expected);
      expect(await redis.get(`${prefix}key:k`)).toBe('3');
      expect(outageWarnings(lines, 'redis')).toEqual([]);
    } finally {
      watch.stop();
      await closeRedis(redis);
    }
  });

  it('counts locally at once, with one warning, while Redis cannot be reached', async () => {
    const { logger, lines } = capturingLogger();
    // Nothing listens on this port: every connection attempt is refused.
    const redis = createRedisClient(`redis://127.0.0.1:${await freePort()}`, {
      connectionName: 'playbook-test',
    });
    const watch = health(logger);
    watch.watch(redis);
    try {
      await waitFor('the first refused connection', async () => outageWarnings(lines, 'redis').length > 0);
      const counter = new FallbackRateCounter({
        shared: new RedisRateCounter(redis),
        local: new MemoryRateCounter(),
        connected: () => redis.status === 'ready',
        health: watch,
      });
      const started = performance.now();
      for (let i = 1; i <= 50; i++) expect((await counter.increment('key:k', 60_000)).count).toBe(i);
      expect(performance.now() - started).toBeLessThan(200);
      // Reconnect attempts go on meanwhile; the outage is still one warning.
      await sleep(500);
      expect(outageWarnings(lines, 'redis')).toHaveLength(1);
      expect(outageWarnings(lines, 'redis')[0]).toMatchObject({
        reason: expect.stringMatching(/ECONNREFUSED/),
      });
    } finally {
      watch.stop();
      await closeRedis(redis);
    }
  });

  it('gives up on a stalled Redis after the command timeout, skips it for a while, then uses it again', async () => {
    const { logger, lines } = capturingLogger();
    // A server of its own: CLIENT PAUSE holds every client of the server, the other suites' too.
    const server = await startRedis();
    const redis = createRedisClient(server.url, { connectionName: 'playbook-test', commandTimeoutMs: 100 });
    const pauser = createRedisClient(server.url, { connectionName: 'playbook-test' });
    const watch = health(logger);
    watch.watch(redis);
    try {
      await waitFor(
        'the Redis connections',
        async () => redis.status === 'ready' && pauser.status === 'ready',
        5000,
      );
      const prefix = `playbook-test:${randomBytes(4).toString('hex')}:rl:`;
      const counter = new FallbackRateCounter({
        shared: new RedisRateCounter(redis, prefix),
        local: new MemoryRateCounter(),
        connected: () => redis.status === 'ready',
        health: watch,
        retryAfterMs: 400,
      });
      expect((await counter.increment('key:k', 60_000)).count).toBe(1);
      // A Redis that holds every command without closing anything: the connection still looks up.
      await pauser.call('CLIENT', 'PAUSE', '800', 'ALL');
      const timings: number[] = [];
      for (let i = 0; i < 5; i++) {
        const started = performance.now();
        await counter.increment('key:k', 60_000);
        timings.push(performance.now() - started);
      }
      // The first request waits out the command timeout; the next ones do not wait at all.
      expect(timings[0]).toBeGreaterThanOrEqual(90);
      expect(timings[0]).toBeLessThan(400);
      expect(Math.max(...timings.slice(1))).toBeLessThan(50);
      expect(outageWarnings(lines, 'redis')).toHaveLength(1);
      expect(outageWarnings(lines, 'redis')[0]).toMatchObject({ reason: 'Command timed out' });

      await sleep(1000);
      await waitFor(
        'Redis answering again',
        async () => (await counter.increment('key:probe', 60_000)).count > 0,
      );
      await waitFor(
        'the shared counter in use again',
        async () => recoveryLines(lines, 'redis').length === 1,
      );
      const shared = await counter.increment('key:k', 60_000);
      expect(shared.count).toBe(Number(await redis.get(`${prefix}key:k`)));
    } finally {
      watch.stop();
      await Promise.all([closeRedis(redis), closeRedis(pauser)]);
      await server.destroy();
    }
  });
});
