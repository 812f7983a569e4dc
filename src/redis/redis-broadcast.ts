import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Broadcast } from '../foundation/broadcast.js';
import type { DependencyHealth } from '../observability/dependency-health.js';
import { Metrics } from '../observability/metrics.js';
import { closeRedis, firstConnection, RedisHealth, timeConnections, timedRedis } from './redis-connection.js';

/** How long a publication waits for a connection opened a moment ago (a CLI command), and no longer. */
const FIRST_CONNECTION_WAIT_MS = 1000;

export interface RedisBroadcastOptions {
  /** The connection that publishes; shared with other uses, and closed by its owner. */
  readonly publisher: Redis;
  readonly logger: FastifyBaseLogger;
  readonly channel: string;
  /** Messages that are ours; anything else on the channel is dropped. */
  readonly accepts: RegExp;
  /** What the channel is for (`revocations`), as its connection and the health's lines name it. */
  readonly role: string;
  /** Redis's health, told whether the channel is subscribed (D31). */
  readonly health: DependencyHealth;
  /** The warning logged when a publication does not reach Redis: what happened and what it means. */
  readonly unannounced: string;
  /** Where the channel's connection attempts, subscriptions and publications are timed (D25, D31). */
  readonly metrics?: Metrics;
}

/**
 * A `Broadcast` over Redis pub/sub: a message published by any instance reaches every instance as
 * soon as Redis delivers it.
 *
 * Pub/sub delivers only to subscribers connected at that moment, so a message can be lost while a
 * subscriber reconnects. That is accepted: every listener bounds its delay by reading storage again
 * (see `Broadcast`), and the channel only makes it immediate. For the same reason a publication that
 * fails is logged, not raised: storage already records what it announces, and the caller's answer
 * must not depend on Redis.
 */
export class RedisBroadcast implements Broadcast {
  private readonly listeners = new Set<(message: string) => void>();
  /** Pub/sub needs a connection of its own: a subscribed connection may send nothing else. */
  private readonly subscriber: Redis;
  private readonly health: RedisHealth;
  private readonly publisherSettled: Promise<void>;
  private readonly metrics: Metrics;
  private closed = false;

  constructor(private readonly options: RedisBroadcastOptions) {
    this.publisherSettled = firstConnection(options.publisher, FIRST_CONNECTION_WAIT_MS);
    this.health = new RedisHealth(options.health, options.role);
    this.metrics = options.metrics ?? new Metrics();
    // Subscribed afresh on every (re)connection rather than by ioredis's automatic resubscription,
    // which would only replay a subscription that once succeeded.
    this.subscriber = options.publisher.duplicate({
      connectionName: `playbook-${options.role}`,
      autoResubscribe: false,
    });
    this.health.watch(this.subscriber, { upOnReady: false });
    timeConnections(this.subscriber, this.metrics);
    this.subscriber.on('ready', () => {
      timedRedis(this.metrics, 'subscribe', () => this.subscriber.subscribe(options.channel)).then(
        () => this.health.up(),
        (error: unknown) => {
          this.health.down(error);
          // A connection that cannot subscribe is of no use here: start over until it can.
          if (!this.closed) this.subscriber.disconnect(true);
        },
      );
    });
    this.subscriber.on('message', (channel: string, message: string) => {
      if (channel === options.channel && options.accepts.test(message)) this.deliver(message);
    });
  }

  async publish(message: string): Promise<void> {
    // This process first and at once, whatever Redis does: its own echo arrives later, harmlessly.
    this.deliver(message);
    if (this.closed) return;
    await this.publisherSettled;
    try {
      await timedRedis(this.metrics, 'publish', () =>
        this.options.publisher.publish(this.options.channel, message),
      );
    } catch (error) {
      this.options.logger.warn(
        {
          channel: this.options.channel,
          message,
          reason: error instanceof Error ? error.message : String(error),
        },
        this.options.unannounced,
      );
    }
  }

  /** Whether messages from other instances arrive at once (the channel is subscribed now). */
  get subscribed(): boolean {
    return this.health.isUp;
  }

  subscribe(listener: (message: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    this.health.stop();
    await closeRedis(this.subscriber);
  }

  private deliver(message: string): void {
    for (const listener of this.listeners) listener(message);
  }
}
