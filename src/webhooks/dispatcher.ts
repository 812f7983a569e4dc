import { randomUUID } from 'node:crypto';
import type dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import type { FastifyBaseLogger } from 'fastify';
import { v7 } from 'uuid';
import { type Change, SERVICE_NAMESPACE, toChange } from '../changes/change-log.js';
import type { Db, WebhookEndpointRow } from '../db/tables.js';
import type { WebhookConfig } from '../foundation/config.js';
import type { DeploymentKeys } from '../foundation/deployment-key.js';
import { UnavailableError } from '../foundation/errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { WebhookEvent } from '../schemas/webhooks.js';
import {
  type AttemptRecord,
  anythingDue,
  type ClaimedDelivery,
  claimDue,
  dropDelivery,
  oldestPendingAgeSeconds,
  pruneFinished,
  recordAttempts,
} from './outbox.js';
import { openSecret, sealSecret, signDelivery, signingKeyOf } from './signing-secret.js';
import type { WebhookEndpoints } from './webhook-endpoints.js';
import { type AttemptResult, postWebhook } from './webhook-request.js';

/**
 * Makes the deliveries the outbox holds (D28), off the request path: each instance looks for what is
 * due when a change commits anywhere (the change follower tells it) and every `pollMs` (retries fall
 * due with time), leases at most as many deliveries as it has free slots (`concurrency`), and makes
 * each attempt with the SSRF-guarded client (webhook-request.ts). An attempt that fails is due again
 * after the next delay of the retry schedule; once the schedule runs out, the delivery has failed. An
 * endpoint whose attempts have failed, with no success, for `disableAfterMs` is disabled (a change of
 * the log, by the service). A lease outlives any attempt (twice the timeout and a second), so that
 * only an instance that died or hangs lets another take its deliveries over.
 */
export interface WebhookDispatcherOptions {
  /** Where deliveries are claimed and attempts recorded: the primary. */
  readonly db: Db;
  /**
   * Where the dispatcher reads what it needs (whether anything is due, the endpoints, the changes):
   * SQLite's reader, never held by a write; the primary on PostgreSQL.
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
  /** How often the dispatcher looks for what fell due with time. */
  readonly pollMs?: number;
}

const DEFAULT_POLL_MS = 1000;
/** How long finished deliveries and attempts are listed. */
const KEPT_FOR_MS = 30 * 86_400_000;
const PRUNE_EVERY_MS = 3_600_000;
/** How long a stop waits for attempts in flight before it lets their leases lapse. */
const STOP_WAIT_MS = 5000;
const USER_AGENT = 'Playbook-Webhooks/1';

type EndpointOfDelivery = Pick<
  WebhookEndpointRow,
  'id' | 'account_id' | 'url' | 'status' | 'secret_sealed' | 'secret_key_id' | 'failing_since'
>;

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
  private readonly inFlight = new Set<Promise<void>>();
  private readonly agents = {
    http: new http.Agent({ keepAlive: true, maxSockets: 8 }),
    https: new https.Agent({ keepAlive: true, maxSockets: 8 }),
  };
  private timer: NodeJS.Timeout | undefined;
  private lastPrune = 0;
  private looking: Promise<void> | undefined;
  private again = false;
  private stopped = true;
  private failing = false;
  private unobserve: (() => void) | undefined;
  /** Attempts finished and not yet written, and the writing of those before them. */
  private readonly unrecorded: {
    record: AttemptRecord & { readonly token: string };
    resolve: (kept: boolean) => void;
    reject: (error: unknown) => void;
  }[] = [];
  private recording: Promise<void> | undefined;

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
    this.timer = setInterval(() => this.wake(), this.options.pollMs ?? DEFAULT_POLL_MS);
    // Delivering must not keep a finished command (or a test) alive.
    this.timer.unref();
    this.unobserve = this.options.metrics.observeWebhookBacklog(() =>
      oldestPendingAgeSeconds(this.probe, this.now()),
    );
    this.wake();
  }

  /** Looks for what is due now (a change committed, a retry was asked for); calls that come meanwhile look once more. */
  wake(): void {
    if (this.stopped) return;
    if (this.looking) {
      this.again = true;
      return;
    }
    this.looking = this.look().finally(() => {
      this.looking = undefined;
    });
  }

  /** Stops looking; waits a little for attempts in flight, whose leases otherwise lapse. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.unobserve?.();
    await this.looking;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.inFlight]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, STOP_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
    this.agents.http.destroy();
    this.agents.https.destroy();
  }

  private async look(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.claimAndSend();
        if (this.failing) this.options.logger.info('webhook deliveries are made again');
        this.failing = false;
      } catch (error) {
        // An outage of the database is said once by its health (D31); anything else once a run here.
        if (!this.failing && !(error instanceof UnavailableError)) {
          this.options.logger.warn({ err: error }, 'cannot look for webhook deliveries; will retry');
        }
        this.failing = true;
        return;
      }
    } while (this.again && !this.stopped);
  }

  private async claimAndSend(): Promise<void> {
    const free = this.options.config.concurrency - this.inFlight.size;
    if (free <= 0) return;
    const nowMs = this.now();
    const now = new Date(nowMs).toISOString();
    if (nowMs - this.lastPrune >= PRUNE_EVERY_MS) {
      this.lastPrune = nowMs;
      await pruneFinished(this.options.db, new Date(nowMs - KEPT_FOR_MS).toISOString());
    }
    if (!(await anythingDue(this.probe, now))) return;
    const token = randomUUID();
    const claimed = await claimDue(this.options.db, {
      now,
      leasedUntil: new Date(nowMs + this.leaseMs).toISOString(),
      token,
      limit: free,
    });
    if (claimed.length === 0) return;
    // More may be due than there were free slots: look again as soon as one frees.
    if (claimed.length === free) this.again = true;
    const [endpoints, changes, keys] = await Promise.all([
      this.endpointsOf(claimed),
      this.changesOf(claimed),
      this.options.keys(),
    ]);
    const hidden = await this.hiddenTargets(changes);
    for (const delivery of claimed) {
      const attempt = this.deliver(delivery, token, { endpoints, changes, hidden, keys }).catch(
        (error: unknown) => {
          this.options.logger.warn(
            { err: error, delivery: delivery.id },
            'a webhook attempt could not be recorded',
          );
        },
      );
      const tracked = attempt.finally(() => {
        this.inFlight.delete(tracked);
        this.wake();
      });
      this.inFlight.add(tracked);
    }
  }

  private async endpointsOf(claimed: readonly ClaimedDelivery[]): Promise<Map<string, EndpointOfDelivery>> {
    const ids = [...new Set(claimed.map((delivery) => delivery.endpoint_id))];
    const rows = await this.probe
      .selectFrom('webhook_endpoints')
      .select(['id', 'account_id', 'url', 'status', 'secret_sealed', 'secret_key_id', 'failing_since'])
      .where('id', 'in', ids)
      .execute();
    return new Map(rows.map((row) => [row.id, row]));
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
    batch: {
      endpoints: ReadonlyMap<string, EndpointOfDelivery>;
      changes: ReadonlyMap<number, Change>;
      hidden: ReadonlySet<string>;
      keys: DeploymentKeys;
    },
  ): Promise<void> {
    const db = this.options.db;
    const endpoint = batch.endpoints.get(delivery.endpoint_id);
    // Deleted since the claim: its deliveries went with it.
    if (!endpoint) return;
    let body: string;
    if (delivery.change_seq === null) {
      body = delivery.payload ?? '{}';
    } else {
      const change = batch.changes.get(Number(delivery.change_seq));
      if (!change || (change.namespace === SERVICE_NAMESPACE && batch.hidden.has(change.target.id))) {
        await dropDelivery(db, delivery.id, token);
        return;
      }
      body = JSON.stringify(eventOf(change));
    }
    const attempt = delivery.attempts + 1;
    const startedMs = this.now();
    const result = await this.send(delivery, endpoint, body, batch.keys, startedMs);
    const at = new Date(startedMs).toISOString();
    const schedule = this.options.config.retryScheduleMs;
    const delay = result.ok ? undefined : schedule[attempt - 1];
    const nextAttemptAt = delay === undefined ? undefined : new Date(this.now() + delay).toISOString();
    const kept = await this.record({
      token,
      id: v7(),
      deliveryId: delivery.id,
      endpointId: endpoint.id,
      attempt,
      at,
      ok: result.ok,
      statusCode: result.statusCode,
      durationMs: result.durationMs,
      error: result.error,
      nextAttemptAt,
    });
    this.observe(delivery, endpoint, attempt, result, nextAttemptAt, kept);
    await this.followEndpointHealth(endpoint, result.ok);
  }

  /**
   * Keeps an attempt's outcome: with those that finish meanwhile, in one transaction (the next turn of
   * the event loop, or once the one before is written). Resolves with whether this instance still held
   * the delivery's lease.
   */
  private record(record: AttemptRecord & { readonly token: string }): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.unrecorded.push({ record, resolve, reject });
      if (this.recording) return;
      this.recording = (async () => {
        // Attempts that end in the same moment share one commit.
        await new Promise((settle) => setImmediate(settle));
        while (this.unrecorded.length > 0) {
          const batch = this.unrecorded.splice(0, 500);
          try {
            const kept = await recordAttempts(
              this.options.db,
              batch.map((entry) => entry.record),
            );
            for (const [i, entry] of batch.entries()) entry.resolve(kept[i] ?? false);
          } catch (error) {
            for (const entry of batch) entry.reject(error);
          }
        }
      })().finally(() => {
        this.recording = undefined;
      });
    });
  }

  /** Signs and POSTs one attempt; a secret that cannot be opened fails it without a connection. */
  private async send(
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
    endpoint: EndpointOfDelivery,
    attempt: number,
    result: AttemptResult,
    nextAttemptAt: string | undefined,
    kept: boolean,
  ): void {
    const outcome = result.ok ? 'succeeded' : nextAttemptAt === undefined ? 'failed' : 'retrying';
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
        // Another instance took the delivery over: this attempt is listed, its outcome not kept.
        ...(kept ? {} : { leaseLost: true }),
      },
      'webhook attempt',
    );
  }

  /** Success clears an endpoint's run of failures; a failure starts one, or ends it in the endpoint disabled. */
  private async followEndpointHealth(endpoint: EndpointOfDelivery, ok: boolean): Promise<void> {
    const db = this.options.db;
    if (ok) {
      if (endpoint.failing_since !== null) {
        await db
          .updateTable('webhook_endpoints')
          .set({ failing_since: null })
          .where('id', '=', endpoint.id)
          .where('failing_since', 'is not', null)
          .execute();
      }
      return;
    }
    if (endpoint.failing_since === null) {
      await db
        .updateTable('webhook_endpoints')
        .set({ failing_since: new Date(this.now()).toISOString() })
        .where('id', '=', endpoint.id)
        .where('failing_since', 'is', null)
        .execute();
      return;
    }
    if (this.now() - Date.parse(endpoint.failing_since) >= this.options.config.disableAfterMs) {
      const disabled = await this.options.endpoints.disableFailing(endpoint.id, endpoint.failing_since);
      if (disabled) {
        this.options.logger.warn(
          { webhookEndpoint: endpoint.id, failingSince: endpoint.failing_since },
          'webhook endpoint disabled: its deliveries have failed for too long',
        );
      }
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
