import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import type { RateCounter, WindowCount } from '../auth/rate-limits.js';
import { Metrics } from '../observability/metrics.js';
import { type RedisHealth, timedRedis } from './redis-connection.js';

/**
 * One hit, atomically: the first hit of a window opens it (PEXPIRE), later hits only count, so a
 * window is never stretched by traffic. A count left without an expiry (written by hand, or by
 * anything but this script) is given one rather than living for ever.
 */
const INCREMENT_SCRIPT = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {count, ttl}
`;

/** The script as a command: ioredis sends EVALSHA, and the script itself after a Redis restart. */
interface RateScripts {
  playbookRateIncrement(key: string, windowMs: number): Promise<unknown>;
}

function pair(reply: unknown): [number, number] {
  if (!Array.isArray(reply) || reply.length !== 2) throw new Error('unexpected reply from a rate script');
  const [count, ttl] = reply.map(Number) as [number, number];
  if (!Number.isFinite(count) || !Number.isFinite(ttl))
    throw new Error('unexpected reply from a rate script');
  return [count, ttl];
}

/**
 * Fixed windows in Redis, shared by every instance that uses the same Redis and prefix (D10). Fails
 * when Redis does not answer; `FallbackRateCounter` decides what happens then.
 */
export class RedisRateCounter implements RateCounter {
  private readonly redis: Redis & RateScripts;

  constructor(
    redis: Redis,
    private readonly prefix = 'playbook:rl:',
    /** Where each count is timed (D25); metrics of its own, which nobody reads, by default. */
    private readonly metrics = new Metrics(),
  ) {
    redis.defineCommand('playbookRateIncrement', { numberOfKeys: 1, lua: INCREMENT_SCRIPT });
    // defineCommand adds the methods at run time; their shape is declared by RateScripts.
    this.redis = redis as Redis & RateScripts;
  }

  async increment(key: string, windowMs: number): Promise<WindowCount> {
    const reply = await timedRedis(this.metrics, 'count', () =>
      this.redis.playbookRateIncrement(this.prefix + key, windowMs),
    );
    const [count, ttl] = pair(reply);
    return { count, resetInMs: ttl };
  }
}

export interface FallbackRateCounterOptions {
  /** The counter shared by all instances. */
  readonly shared: RateCounter;
  /** This instance's own counter, used while the shared one does not answer. */
  readonly local: RateCounter;
  /** Whether the shared counter's connection is up; when it is not, it is not even tried. */
  readonly connected: () => boolean;
  /** Told of every failure and every success; it logs the changes once each. */
  readonly health: RedisHealth;
  /**
   * After a failure on a connection that still looks up (a stalled Redis answers nothing and closes
   * nothing), how long requests skip it before one tries again, so that at most one request per
   * period waits out a command timeout.
   */
  readonly retryAfterMs?: number;
}

/**
 * The shared counter while it answers, this instance's own otherwise (issue 4: when Redis is
 * unreachable the service keeps serving, with limits per instance). No request waits on a Redis that
 * is known to be down; the first one to meet a stalled Redis waits at most its command timeout.
 */
export class FallbackRateCounter implements RateCounter {
  private skipUntil = 0;
  private readonly retryAfterMs: number;

  constructor(private readonly options: FallbackRateCounterOptions) {
    this.retryAfterMs = options.retryAfterMs ?? 1000;
  }

  increment(key: string, windowMs: number): Promise<WindowCount> {
    return this.attempt((counter) => counter.increment(key, windowMs));
  }

  private async attempt(
    operation: (counter: RateCounter) => WindowCount | Promise<WindowCount>,
  ): Promise<WindowCount> {
    const { shared, local, connected, health } = this.options;
    // A monotonic clock: the skip is about the network, not about the service's (injectable) time.
    if (connected() && performance.now() >= this.skipUntil) {
      try {
        const result = await operation(shared);
        health.up();
        return result;
      } catch (error) {
        this.skipUntil = performance.now() + this.retryAfterMs;
        health.down(error);
      }
    }
    // A connection that is not up has already told its health why (its own events), once.
    return operation(local);
  }
}
