import { randomUUID } from 'node:crypto';
import type dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import type { FastifyBaseLogger } from 'fastify';
import { v7 } from 'uuid';
import type { Db } from '../db/tables.js';
import type { WebhookConfig } from '../foundation/config.js';
import type { DeploymentKeys } from '../foundation/deployment-key.js';
import { UnavailableError } from '../foundation/errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import { AttemptSlots } from './attempt-slots.js';
import {
  type ClaimedDelivery,
  type ClaimRequest,
  type EndpointOfDelivery,
  isSlow,
  SLOW_TIMEOUT_MS,
} from './claim.js';
import { bodyOf, type EventSource, eventsOf } from './event-bodies.js';
import {
  type AttemptRecord,
  type DispatchTurnOutcome,
  type Lease,
  nextDueAt,
  oldestPendingAgeSeconds,
  pruneFinished,
  takeDispatchTurn,
} from './outbox.js';
import { openSecret, sealSecret, signDelivery, signingKeyOf } from './signing-secret.js';
import type { WebhookEndpoints } from './webhook-endpoints.js';
import { type AttemptResult, postWebhook } from './webhook-request.js';

/**
 * Makes the deliveries the outbox holds (D28), off the request path. Each instance works in turns: a
 * turn is one transaction that keeps the attempts ended since the last one and leases what is due, at
 * most as many deliveries as the instance has free slots (`concurrency`), shared between the accounts
 * and their endpoints as claim.ts says: in turns, half the slots at most for one account while
 * another waits, at most `perEndpoint` of one endpoint in flight, one of an endpoint that keeps timing
 * out (tried then with a short timeout), so that no endpoint and no account holds every slot. A turn is
 * taken when a change commits anywhere (the change follower says so), when an attempt ends, when a
 * retry falls due (a timer set for it) and every `pollMs` (a delivery whose lease lapsed, one made due
 * by another instance that stopped); a look that finds nothing due reads an index of SQLite's reader
 * and writes nothing. Attempts are made with the SSRF-guarded client (webhook-request.ts). An attempt
 * that fails is due again after the next delay of the retry schedule; once the schedule runs out, the
 * delivery has failed. An endpoint whose attempts have failed, with no success, for `disableAfterMs`
 * is disabled (a change of the log, by the service). A lease outlives any attempt (twice the timeout
 * and a second), so that only an instance that died or hangs lets another take its deliveries over.
 */
export interface WebhookDispatcherOptions {
  /** Where deliveries are claimed and attempts recorded: the primary. */
  readonly db: Db;
  /**
   * Where the dispatcher reads what it needs (whether anything is due, the changes): SQLite's reader,
   * never held by a write; the primary on PostgreSQL.
   */
  readonly probe?: Db;
  readonly keys: () => Promise<DeploymentKeys>;
  readonly endpoints: WebhookEndpoints;
  readonly config: WebhookConfig;
  readonly metrics: Metrics;
  readonly tracing?: Tracing | undefined;
  readonly logger: FastifyBaseLogger;
  readonly now?: () => number;
  /** Name resolution of endpoints' hosts; the system's by default. */
  readonly resolve?: typeof dns.lookup;
  /** The longest the dispatcher goes without looking for what is due. */
  readonly pollMs?: number;
}

/**
 * Commits wake the dispatcher and retries set timers: the poll only finds what another instance left
 * (a lease that lapsed, a retry of an instance that stopped), which may wait this long.
 */
const DEFAULT_POLL_MS = 5000;
/** How long finished deliveries and attempts are listed. */
const KEPT_FOR_MS = 30 * 86_400_000;
const PRUNE_EVERY_MS = 3_600_000;
/** How long a stop waits for attempts in flight before it lets their leases lapse. */
const STOP_WAIT_MS = 5000;
/** Attempts kept per turn at most: a turn's transaction stays short whatever ended meanwhile. */
const ATTEMPTS_PER_TURN = 500;
const USER_AGENT = 'Playbook-Webhooks/1';

export class WebhookDispatcher {
  private readonly now: () => number;
  private readonly probe: Db;
  /** Attempts in flight and the keeping of their outcome: what a stop waits for. */
  private readonly pending = new Set<Promise<void>>();
  /** The slots the requests in flight hold. */
  private readonly slots: AttemptSlots;
  private readonly agents = {
    http: new http.Agent({ keepAlive: true, maxSockets: 8 }),
    https: new https.Agent({ keepAlive: true, maxSockets: 8 }),
  };
  private pollTimer: NodeJS.Timeout | undefined;
  private dueTimer: { timer: NodeJS.Timeout; at: number } | undefined;
  private lastPrune = 0;
  /** The turn running, and whether another was asked for meanwhile. */
  private turning: Promise<void> | undefined;
  private again = false;
  /** Something may be due: the next turn looks (a change committed, a retry fell due, a poll). */
  private due = false;
  /** The last claim left due deliveries for want of a slot, or of an endpoint's or an account's share. */
  private left = false;
  private stopped = true;
  private failing = false;
  private unobserve: (() => void) | undefined;
  /** Attempts ended and not yet kept, each with who waits for it. */
  private readonly ended: { record: AttemptRecord; kept: (kept: boolean) => void }[] = [];
  /** Leased deliveries found not to be sent, not yet dropped. */
  private readonly drops: Lease[] = [];

  constructor(private readonly options: WebhookDispatcherOptions) {
    this.now = options.now ?? Date.now;
    this.probe = options.probe ?? options.db;
    const { concurrency, timeoutMs } = options.config;
    // A success within a quarter of the timeout, at most a second, is quick.
    this.slots = new AttemptSlots(concurrency, Math.min(1000, timeoutMs / 4));
  }

  /** How long a claimed delivery stays this instance's: longer than any attempt can take. */
  get leaseMs(): number {
    return 2 * this.options.config.timeoutMs + 1000;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.lastPrune = this.now();
    this.pollTimer = setInterval(() => this.wake(), this.options.pollMs ?? DEFAULT_POLL_MS);
    // Delivering must not keep a finished command (or a test) alive.
    this.pollTimer.unref();
    this.unobserve = this.options.metrics.observeWebhookBacklog(() =>
      oldestPendingAgeSeconds(this.probe, this.now()),
    );
    this.wake();
  }

  /**
   * Something may be due now (a change committed, a retry was asked for): a turn looks, after what
   * runs now, so that the commit that woke it answers first. Calls that come meanwhile share it.
   */
  wake(): void {
    if (this.stopped) return;
    this.due = true;
    this.turn();
  }

  /** Stops looking; waits a little for attempts in flight, whose leases otherwise lapse. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.pollTimer);
    clearTimeout(this.dueTimer?.timer);
    this.dueTimer = undefined;
    this.unobserve?.();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.pending]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, STOP_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
    await this.turning;
    this.agents.http.destroy();
    this.agents.https.destroy();
  }

  /** Takes a turn soon; one asked for while a turn runs is taken after it. */
  private turn(): void {
    if (this.turning) {
      this.again = true;
      return;
    }
    this.turning = (async () => {
      // What else asks for a turn in this pass of the event loop (attempts that end together, the
      // changes of one commit) is served by this one.
      await new Promise((resolve) => setImmediate(resolve));
      do {
        this.again = false;
        try {
          await this.takeTurn();
          if (this.failing) this.options.logger.info('webhook deliveries are made again');
          this.failing = false;
        } catch (error) {
          // An outage of the database is said once by its health (D31); anything else once a run
          // here. What was to be written waits for the next turn: the poll's, at the latest.
          if (!this.failing && !(error instanceof UnavailableError)) {
            this.options.logger.warn({ err: error }, 'cannot look for webhook deliveries; will retry');
          }
          this.failing = true;
          return;
        }
      } while (this.again);
    })().finally(() => {
      this.turning = undefined;
    });
  }

  private async takeTurn(): Promise<void> {
    const nowMs = this.now();
    const now = new Date(nowMs).toISOString();
    const free = this.stopped ? 0 : this.slots.free;
    const ended = this.ended.splice(0, ATTEMPTS_PER_TURN);
    const drops = this.drops.splice(0);
    if (this.ended.length > 0) this.again = true;
    let claim: ClaimRequest | undefined;
    let outcome: DispatchTurnOutcome;
    try {
      if (free > 0 && this.due) {
        this.due = false;
        if (nowMs - this.lastPrune >= PRUNE_EVERY_MS) {
          this.lastPrune = nowMs;
          await pruneFinished(this.options.db, new Date(nowMs - KEPT_FOR_MS).toISOString());
        }
        // A turn that writes anyway claims in the same transaction; one that would write nothing else
        // first reads whether anything is due, and when the first delivery falls due.
        let dueNow = ended.length > 0 || drops.length > 0;
        if (!dueNow) {
          const next = await nextDueAt(this.probe, now);
          dueNow = next !== undefined && next <= now;
          if (next !== undefined && !dueNow) this.wakeAt(Date.parse(next));
        }
        if (dueNow) {
          const { concurrency, perEndpoint } = this.options.config;
          claim = {
            now,
            leasedUntil: new Date(nowMs + this.leaseMs).toISOString(),
            token: randomUUID(),
            limit: free,
            perEndpoint,
            perAccount: Math.max(1, Math.floor(concurrency / 2)),
            unbounded: this.slots.answeringQuickly(nowMs),
            inFlight: this.slots.inFlight(),
            inFlightByAccount: this.slots.inFlightByAccount(),
            lastServed: this.slots.lastServed,
          };
        }
      }
      if (ended.length === 0 && drops.length === 0 && claim === undefined) return;
      outcome = await takeDispatchTurn(this.options.db, {
        attempts: ended.map((entry) => entry.record),
        drops,
        claim,
      });
    } catch (error) {
      // Nothing of the turn was written: the next turn writes it.
      this.ended.unshift(...ended);
      this.drops.unshift(...drops);
      if (claim) this.due = true;
      throw error;
    }
    for (const [i, entry] of ended.entries()) entry.kept(outcome.kept[i] ?? false);
    if (claim) {
      // More is due than was leased: look again as soon as a slot, or a share, frees.
      this.left = outcome.left || outcome.claimed.length === claim.limit;
      if (outcome.claimed.length > 0) await this.send(outcome.claimed, claim.token);
    }
  }

  /** A turn when `atMs` comes, unless one is set for sooner. */
  private wakeAt(atMs: number): void {
    if (this.stopped) return;
    if (this.dueTimer && this.dueTimer.at <= atMs) return;
    clearTimeout(this.dueTimer?.timer);
    const timer = setTimeout(
      () => {
        this.dueTimer = undefined;
        this.wake();
      },
      Math.max(0, atMs - this.now()),
    );
    timer.unref();
    this.dueTimer = { timer, at: atMs };
  }

  /** Starts an attempt of each delivery leased, with what it needs read at once for all of them. */
  private async send(claimed: readonly ClaimedDelivery[], token: string): Promise<void> {
    const startedMs = this.now();
    const releases = claimed.map((delivery) => this.hold(delivery.endpoint, startedMs));
    let context: { events: EventSource; keys: DeploymentKeys };
    try {
      const [events, keys] = await Promise.all([eventsOf(this.probe, claimed), this.options.keys()]);
      context = { events, keys };
    } catch (error) {
      // The leases lapse, and the deliveries are made then, by whichever instance.
      for (const release of releases) release();
      throw error;
    }
    for (const [i, delivery] of claimed.entries()) {
      const attempt = this.deliver(delivery, token, context, releases[i]!).catch((error: unknown) => {
        this.options.logger.warn(
          { err: error, delivery: delivery.id },
          'a webhook attempt could not be recorded',
        );
      });
      const tracked = attempt.finally(() => this.pending.delete(tracked));
      this.pending.add(tracked);
    }
  }

  /** Counts a request that starts; returns what ends it, which frees its slot for what was left. */
  private hold(endpoint: EndpointOfDelivery, startedMs: number): () => void {
    const release = this.slots.hold(endpoint.id, endpoint.account_id, startedMs);
    return () => {
      release();
      if (this.left && !this.stopped) this.due = true;
    };
  }

  private async deliver(
    delivery: ClaimedDelivery,
    token: string,
    context: { events: EventSource; keys: DeploymentKeys },
    release: () => void,
  ): Promise<void> {
    const { endpoint } = delivery;
    let result: AttemptResult;
    const startedMs = this.now();
    try {
      const body = bodyOf(delivery, context.events);
      if (body === undefined) {
        this.drops.push({ deliveryId: delivery.id, token });
        return;
      }
      result = await this.attempt(delivery, endpoint, body, context.keys, startedMs);
      this.slots.ended(endpoint.id, result.ok, result.durationMs);
    } finally {
      release();
      this.turn();
    }
    const attempt = delivery.attempts + 1;
    const at = new Date(startedMs).toISOString();
    const schedule = this.options.config.retryScheduleMs;
    const delay = result.ok ? undefined : schedule[attempt - 1];
    const nextAttemptAt = delay === undefined ? undefined : new Date(this.now() + delay).toISOString();
    const kept = await this.keep({
      id: v7(),
      deliveryId: delivery.id,
      endpointId: endpoint.id,
      token,
      attempt,
      at,
      ok: result.ok,
      statusCode: result.statusCode,
      durationMs: result.durationMs,
      error: result.error,
      reason: result.failure,
      nextAttemptAt,
    });
    if (nextAttemptAt !== undefined && kept) this.wakeAt(Date.parse(nextAttemptAt));
    this.observe(delivery, attempt, result, nextAttemptAt, kept);
    await this.disableIfFailingTooLong(endpoint, result.ok);
  }

  /** Hands an attempt's outcome to the next turn; resolves once written, with whether the lease still held. */
  private keep(record: AttemptRecord): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      this.ended.push({ record, kept: resolve });
      this.turn();
    });
  }

  /** Signs and POSTs one attempt; a secret that cannot be opened fails it without a connection. */
  private async attempt(
    delivery: ClaimedDelivery,
    endpoint: EndpointOfDelivery,
    body: string,
    keys: DeploymentKeys,
    startedMs: number,
  ): Promise<AttemptResult> {
    let secret: string;
    try {
      secret = openSecret(keys, endpoint.id, {
        sealed: endpoint.secret_sealed,
        keyId: endpoint.secret_key_id,
      });
    } catch (error) {
      this.options.logger.error(
        { webhookEndpoint: endpoint.id, reason: (error as Error).message },
        'a webhook signing secret cannot be opened',
      );
      return {
        ok: false,
        durationMs: 0,
        error: 'the signing secret cannot be used: create the endpoint again',
        failure: 'network',
      };
    }
    if (endpoint.secret_key_id !== keys.current.id) await this.reseal(endpoint, secret, keys);
    const timestamp = Math.floor(startedMs / 1000);
    const headers = {
      'content-type': 'application/json',
      'user-agent': USER_AGENT,
      'webhook-id': delivery.event_id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signDelivery(signingKeyOf(secret), delivery.event_id, timestamp, body),
    };
    const { timeoutMs } = this.options.config;
    return postWebhook(endpoint.url, headers, body, {
      // An endpoint that keeps timing out holds a slot for less time, until it answers again.
      timeoutMs: isSlow(endpoint) ? Math.min(timeoutMs, SLOW_TIMEOUT_MS) : timeoutMs,
      allowHttp: this.options.config.allowHttp,
      allowPrivate: this.options.config.allowPrivate,
      agents: this.agents,
      ...(this.options.resolve ? { resolve: this.options.resolve } : {}),
    });
  }

  /** One log line, one span and the counts of an attempt: never the secret or the body. */
  private observe(
    delivery: ClaimedDelivery,
    attempt: number,
    result: AttemptResult,
    nextAttemptAt: string | undefined,
    kept: boolean,
  ): void {
    const outcome = result.ok ? 'succeeded' : nextAttemptAt === undefined ? 'failed' : 'retrying';
    const { endpoint } = delivery;
    const { metrics, tracing, logger } = this.options;
    metrics.webhookAttempts.inc({
      outcome: result.ok ? 'succeeded' : 'failed',
      reason: result.failure ?? 'none',
    });
    metrics.webhookAttemptDuration.observe(result.durationMs / 1000);
    if (outcome !== 'retrying') metrics.webhookDeliveries.inc({ outcome });
    tracing?.record(
      'webhook.attempt',
      {
        'playbook.webhook.endpoint_id': endpoint.id,
        'playbook.webhook.delivery_id': delivery.id,
        'playbook.webhook.event_type': delivery.event_type,
        'playbook.webhook.attempt': String(attempt),
        'http.response.status_code': String(result.statusCode ?? ''),
      },
      result.durationMs,
      result.ok,
    );
    logger.info(
      {
        webhookEndpoint: endpoint.id,
        delivery: delivery.id,
        event: delivery.event_id,
        type: delivery.event_type,
        attempt,
        status: result.statusCode,
        ms: result.durationMs,
        outcome,
        ...(result.error === undefined ? {} : { error: result.error }),
        ...(nextAttemptAt === undefined ? {} : { nextAttemptAt }),
        // Another instance took the delivery over (this attempt is listed, its outcome not kept), or
        // it went with its endpoint.
        ...(kept ? {} : { leaseLost: true }),
      },
      'webhook attempt',
    );
  }

  /**
   * A failure of an endpoint whose run of failures (started by an earlier attempt, and not ended by a
   * success since its claim) has lasted `disableAfterMs` disables it.
   */
  private async disableIfFailingTooLong(endpoint: EndpointOfDelivery, ok: boolean): Promise<void> {
    if (ok || endpoint.failing_since === null) return;
    if (this.now() - Date.parse(endpoint.failing_since) < this.options.config.disableAfterMs) return;
    const disabled = await this.options.endpoints.disableFailing(endpoint.id, endpoint.failing_since);
    if (disabled) {
      this.options.logger.warn(
        { webhookEndpoint: endpoint.id, failingSince: endpoint.failing_since },
        'webhook endpoint disabled: its deliveries have failed for too long',
      );
    }
  }

  /** A secret sealed under an older deployment key is sealed again under the current one. */
  private async reseal(endpoint: EndpointOfDelivery, secret: string, keys: DeploymentKeys): Promise<void> {
    const { sealed, keyId } = sealSecret(keys, endpoint.id, secret);
    await this.options.db
      .updateTable('webhook_endpoints')
      .set({ secret_sealed: sealed, secret_key_id: keyId })
      .where('id', '=', endpoint.id)
      .where('secret_key_id', '=', endpoint.secret_key_id)
      .execute();
  }
}
