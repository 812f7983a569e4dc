import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import { closeRedis, firstConnection, RedisHealth } from './redis-connection.js';
import type { RevocationBus } from './revocation-bus.js';

/** Key ids are short and alphanumeric (D8); anything else on the channel is not ours. */
const KEY_ID = /^[A-Za-z0-9]{1,64}$/;

/** How long a revocation waits for a connection opened a moment ago (a CLI command), and no longer. */
const FIRST_CONNECTION_WAIT_MS = 1000;

export interface RedisRevocationBusOptions {
  /** The connection that publishes; shared with other uses, and closed by its owner. */
  readonly publisher: Redis;
  readonly logger: FastifyBaseLogger;
  readonly channel?: string;
}

/**
 * Revocations fanned out over Redis pub/sub (D8, D10): a key revoked through any instance is evicted
 * from every instance's verifier cache as soon as the message arrives.
 *
 * Pub/sub delivers only to subscribers connected at that moment, so a message can be lost while a
 * subscriber reconnects. That is accepted: the verifier re-reads a cached key from storage at most a
 * second after caching it, which bounds the delay without the bus; the bus only makes it immediate.
 * For the same reason a publication that fails is logged, not raised: storage already records the
 * revocation, and the caller's answer must not depend on Redis.
 */
export class RedisRevocationBus implements RevocationBus {
  private readonly listeners = new Set<(keyId: string) => void>();
  private readonly publisher: Redis;
  /** Pub/sub needs a connection of its own: a subscribed connection may send nothing else. */
  private readonly subscriber: Redis;
  private readonly health: RedisHealth;
  private readonly channel: string;
  private readonly logger: FastifyBaseLogger;
  private readonly publisherSettled: Promise<void>;
  private closed = false;

  constructor(options: RedisRevocationBusOptions) {
    this.publisher = options.publisher;
    this.logger = options.logger;
    this.channel = options.channel ?? 'playbook:revocations';
    this.publisherSettled = firstConnection(this.publisher, FIRST_CONNECTION_WAIT_MS);
    this.health = new RedisHealth(options.logger, {
      role: 'revocations',
      whileDown:
        "revocations made on other instances reach this one through its keys' one-second storage re-read",
      whileUp: 'revocations made on other instances take effect here at once',
    });
    // Subscribed afresh on every (re)connection rather than by ioredis's automatic resubscription,
    // which would only replay a subscription that once succeeded.
    this.subscriber = options.publisher.duplicate({
      connectionName: 'playbook-revocations',
      autoResubscribe: false,
    });
    this.health.watch(this.subscriber, { upOnReady: false });
    this.subscriber.on('ready', () => {
      this.subscriber.subscribe(this.channel).then(
        () => this.health.up(),
        (error: unknown) => {
          this.health.down(error);
          // A connection that cannot subscribe is of no use here: start over until it can.
          if (!this.closed) this.subscriber.disconnect(true);
        },
      );
    });
    this.subscriber.on('message', (channel: string, message: string) => {
      if (channel === this.channel && KEY_ID.test(message)) this.deliver(message);
    });
  }

  async publish(keyId: string): Promise<void> {
    // This process first and at once, whatever Redis does: its own echo arrives later, harmlessly.
    this.deliver(keyId);
    if (this.closed) return;
    await this.publisherSettled;
    try {
      await this.publisher.publish(this.channel, keyId);
    } catch (error) {
      this.logger.warn(
        { keyId, reason: error instanceof Error ? error.message : String(error) },
        "revocation not announced through Redis; other instances refuse the key after their keys' one-second storage re-read",
      );
    }
  }

  /** Whether revocations from other instances arrive at once (the channel is subscribed now). */
  get subscribed(): boolean {
    return this.health.isUp;
  }

  subscribe(listener: (keyId: string) => void): () => void {
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

  private deliver(keyId: string): void {
    for (const listener of this.listeners) listener(keyId);
  }
}
