import { randomUUID } from 'node:crypto';
import type dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import type { FastifyBaseLogger } from 'fastify';
import { LRUCache } from 'lru-cache';
import { v7 } from 'uuid';
import { type Change, SERVICE_NAMESPACE, toChange } from '../changes/change-log.js';
import type { Db } from '../db/tables.js';
import type { WebhookConfig } from '../foundation/config.js';
import type { DeploymentKeys } from '../foundation/deployment-key.js';
import { UnavailableError } from '../foundation/errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { WebhookEvent } from '../schemas/webhooks.js';
import {
  type AttemptRecord,
  type ClaimedDelivery,
  type ClaimRequest,
  type DispatchTurnOutcome,
  type EndpointOfDelivery,
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
 * most as many deliveries as the instance has free slots (`concurrency`) and at most `perEndpoint` of
 * one endpoint in flight, so that an endpoint that answers slowly never holds every slot. A turn is
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
/** Endpoints remembered as quick to answer; one forgotten is held to its share until it answers again. */
const QUICK_ENDPOINTS_KEPT = 10_000;
/** Attempts kept per turn at most: a turn's transaction stays short whatever ended meanwhile. */
const ATTEMPTS_PER_TURN = 500;
const USER_AGENT = 'Playbook-Webhooks/1';

/** The body of an event about `change`: for the account's own changes, all the log says of it. */
export function eventOf(change: Change): WebhookEvent {
  const own = change.namespace !== SERVICE_NAMESPACE;
  return {
    type: change.type,
    timestamp: change.at,
    data: {
      id: change.id,
      seq: change.seq,
      ...(own ? { accountId: change.namespace } : {}),
      owner: own ? 'account' : 'svc',
      target: change.target,
      // How the service's own content changed, and who changed it, is read from the content itself.
      ...(own
        ? {
            summary: change.summary,
            actor: change.actor,
            ...(change.requestId === undefined ? {} : { requestId: change.requestId }),
          }
        : {}),
    },
  };
}

export class WebhookDispatcher {
  private readonly now: () => number;
  private readonly probe: Db;
  /** Attempts in flight and the keeping of their outcome: what a stop waits for. */
  private readonly pending = new Set<Promise<void>>();
  /** Requests in flight, in all and by endpoint (when each started): the slots they hold. */
  private requests = 0;
  private readonly requestsByEndpoint = new Map<string, number[]>();
  /** Endpoints whose last attempt here succeeded quickly: they may take any free slot. */
  private readonly quick = new LRUCache<string, true>({ max: QUICK_ENDPOINTS_KEPT });
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
  /** The last claim left due deliveries for want of a slot or of an endpoint's share. */
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
    const free = this.stopped ? 0 : this.options.config.concurrency - this.requests;
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
          claim = {
            now,
            leasedUntil: new Date(nowMs + this.leaseMs).toISOString(),
            token: randomUUID(),
            limit: free,
            perEndpoint: this.options.config.perEndpoint,
            unbounded: this.answeringQuickly(nowMs),
            inFlight: new Map(
              [...this.requestsByEndpoint].map(([endpointId, started]) => [endpointId, started.length]),
            ),
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
      // More is due than was leased: look again as soon as a slot, or an endpoint's share, frees.
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
    const releases = claimed.map((delivery) => this.hold(delivery.endpoint_id, startedMs));
    let context: { changes: ReadonlyMap<number, Change>; hidden: ReadonlySet<string>; keys: DeploymentKeys };
    try {
      const [changes, keys] = await Promise.all([this.changesOf(claimed), this.options.keys()]);
      context = { changes, hidden: await this.hiddenTargets(changes), keys };
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

  /**
   * An attempt that succeeded within this time, with none of its endpoint's still waiting longer, lets
   * the endpoint take any free slot; until then, and from the moment one of its attempts fails or takes
   * longer, it has its share (`perEndpoint`). A slow or failing endpoint thus holds its share of the
   * slots, never all of them, and a quick one is not held to a share that its answers' time would make
   * a bottleneck.
   */
  private get quickMs(): number {
    return Math.min(1000, this.options.config.timeoutMs / 4);
  }

  private answeringQuickly(nowMs: number): Set<string> {
    const quick = new Set<string>();
    for (const endpointId of this.quick.keys()) {
      const started = this.requestsByEndpoint.get(endpointId) ?? [];
      if (started.every((at) => nowMs - at < this.quickMs)) quick.add(endpointId);
    }
    return quick;
  }

  /** Counts a request that starts; returns what ends it, which frees its slot for what was left. */
  private hold(endpointId: string, startedMs: number): () => void {
    this.requests++;
    const started = this.requestsByEndpoint.get(endpointId) ?? [];
    started.push(startedMs);
    this.requestsByEndpoint.set(endpointId, started);
    return () => {
      this.requests--;
      started.splice(started.indexOf(startedMs), 1);
      if (started.length === 0) this.requestsByEndpoint.delete(endpointId);
      if (this.left && !this.stopped) this.due = true;
    };
  }

  private async changesOf(claimed: readonly ClaimedDelivery[]): Promise<Map<number, Change>> {
    const seqs = claimed.flatMap((delivery) =>
      delivery.change_seq === null ? [] : [Number(delivery.change_seq)],
    );
    if (seqs.length === 0) return new Map();
    const rows = await this.probe.selectFrom('changes').selectAll().where('seq', 'in', seqs).execute();
    return new Map(rows.map((row) => [Number(row.seq), toChange(row)]));
  }
  /**
   * The service's Catalogs and Resources among the targets that no account may see now (D5: the
   * service's drafts): their changes are not told to anyone.
   */
  private async hiddenTargets(changes: ReadonlyMap<number, Change>): Promise<Set<string>> {
    const service = [...changes.values()].filter((change) => change.namespace === SERVICE_NAMESPACE);
    const catalogIds = service.filter((c) => c.target.kind === 'catalog').map((c) => c.target.id);
    const resourceIds = service.filter((c) => c.target.kind === 'resource').map((c) => c.target.id);
    const visible = new Set<string>();
    if (catalogIds.length > 0) {
      const rows = await this.probe
        .selectFrom('catalogs')
        .select('id')
        .where('id', 'in', catalogIds)
        .where('status', '<>', 'draft')
        .execute();
      for (const row of rows) visible.add(row.id);
    }
    if (resourceIds.length > 0) {
      const rows = await this.probe
        .selectFrom('resources as r')
        .innerJoin('catalogs as c', 'c.id', 'r.catalog_id')
        .select('r.id')
        .where('r.id', 'in', resourceIds)
        .where('r.status', '<>', 'draft')
        .where('c.status', '<>', 'draft')
        .execute();
      for (const row of rows) visible.add(row.id);
    }
    return new Set([...catalogIds, ...resourceIds].filter((id) => !visible.has(id)));
  }

  private async deliver(
    delivery: ClaimedDelivery,
    token: string,
    context: {
      changes: ReadonlyMap<number, Change>;
      hidden: ReadonlySet<string>;
      keys: DeploymentKeys;
    },
    release: () => void,
  ): Promise<void> {
    const { endpoint } = delivery;
    let body: string;
    let result: AttemptResult;
    const startedMs = this.now();
    try {
      if (delivery.change_seq === null) {
        body = delivery.payload ?? '{}';
      } else {
        const change = context.changes.get(Number(delivery.change_seq));
        if (!change || (change.namespace === SERVICE_NAMESPACE && context.hidden.has(change.target.id))) {
          this.drops.push({ deliveryId: delivery.id, token });
          return;
        }
        body = JSON.stringify(eventOf(change));
      }
      result = await this.attempt(delivery, endpoint, body, context.keys, startedMs);
      // Only a success answered in time makes an endpoint quick: one that fails, however fast, is held
      // to its share, so that its retries never crowd out the deliveries of the others.
      if (result.ok && result.durationMs < this.quickMs) this.quick.set(endpoint.id, true);
      else this.quick.delete(endpoint.id);
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
    return postWebhook(endpoint.url, headers, body, {
      timeoutMs: this.options.config.timeoutMs,
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
