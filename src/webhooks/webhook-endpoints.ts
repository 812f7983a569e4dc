import { v7 } from 'uuid';
import { accountCreated, createAccountIfAbsent, lockAccount } from '../accounts/accounts.js';
import { type KeyManager, mayActFor } from '../auth/api-key-service.js';
import type { ChangeActor, ChangeType, NewChange } from '../changes/change-log.js';
import type { UnitOfWork } from '../changes/unit-of-work.js';
import type { Db, WebhookAttemptRow, WebhookDeliveryRow, WebhookEndpointRow } from '../db/tables.js';
import type { DeploymentKeys } from '../foundation/deployment-key.js';
import { ConflictError, InputError, LimitError, NotFoundError } from '../foundation/errors.js';
import { type PageRequest, readPage } from '../foundation/paging.js';
import {
  type CreatedWebhookEndpoint,
  type CreateWebhookEndpointBody,
  EVERY_EVENT,
  MAX_WEBHOOK_ENDPOINTS,
  TEST_EVENT,
  type UpdateWebhookEndpointBody,
  type WebhookDelivery,
  type WebhookDeliveryAttempt,
  type WebhookDeliveryAttemptPage,
  type WebhookEndpoint,
  type WebhookEndpointPage,
} from '../schemas/webhooks.js';
import { checkEndpointUrl, type EndpointUrlRules } from './endpoint-url.js';
import type { PendingBound } from './pending-bound.js';
import { generateSigningSecret, sealSecret } from './signing-secret.js';

/**
 * An account's webhook endpoints (D28), managed by its users with an access token: created (the
 * signing secret shown once), listed, read, changed, deleted, their deliveries listed, one sent again,
 * a test event sent. Every change of an endpoint is a change of the log, in the same transaction.
 * Methods named `…For` apply the account rule: a user of the account, else 403 for an account named
 * in the request and 404 for an endpoint of another account (as if it did not exist).
 */
export interface WebhookEndpointsOptions {
  readonly writes: UnitOfWork;
  /** The deployment's keys (loaded once by the composition root), which seal signing secrets. */
  readonly keys: () => Promise<DeploymentKeys>;
  readonly urls: EndpointUrlRules;
  readonly now?: () => number;
  /** Told when a delivery became due outside a change (a retry, a test): the dispatcher looks now. */
  readonly onDue?: () => void;
  /** What is pending to an endpoint, counted and bounded: a test or a retry adds to it. */
  readonly pending: PendingBound;
}

/** The one mapper from a stored endpoint to its API shape: never its secret. */
export function toWebhookEndpoint(row: WebhookEndpointRow): WebhookEndpoint {
  return {
    id: row.id,
    accountId: row.account_id,
    url: row.url,
    events: JSON.parse(row.events) as WebhookEndpoint['events'],
    ...(row.description === null ? {} : { description: row.description }),
    status: row.status,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export function toWebhookDelivery(row: WebhookDeliveryRow): WebhookDelivery {
  return {
    id: row.id,
    endpointId: row.endpoint_id,
    eventId: row.event_id,
    type: row.event_type as WebhookDelivery['type'],
    status: row.status,
    attempts: row.attempts,
    ...(row.status === 'pending' ? { nextAttemptAt: row.next_attempt_at } : {}),
    createdAt: row.created_at,
  };
}

type AttemptWithEvent = WebhookAttemptRow & Pick<WebhookDeliveryRow, 'event_id' | 'event_type'>;

function toAttempt(row: AttemptWithEvent): WebhookDeliveryAttempt {
  return {
    id: row.id,
    deliveryId: row.delivery_id,
    eventId: row.event_id,
    type: row.event_type as WebhookDeliveryAttempt['type'],
    attempt: row.attempt,
    at: row.at,
    outcome: row.outcome,
    ...(row.status_code === null ? {} : { statusCode: row.status_code }),
    durationMs: row.duration_ms,
    ...(row.error === null ? {} : { error: row.error }),
    ...(row.reason === null ? {} : { reason: row.reason }),
    ...(row.next_attempt_at === null ? {} : { nextAttemptAt: row.next_attempt_at }),
  };
}

/** The types an endpoint takes, as given: distinct (the schema says so), `*` alone. */
function checkEvents(events: readonly string[]): string[] {
  if (events.includes(EVERY_EVENT) && events.length > 1) {
    throw InputError.of('body', 'events', `"${EVERY_EVENT}" takes every type: give it alone, or list types`);
  }
  return [...events];
}

/** The host of a URL: what an audit summary names, never the path or query, which may hold a token. */
function hostOf(url: string): string {
  return new URL(url).host;
}

function endpointChange(
  row: Pick<WebhookEndpointRow, 'id' | 'account_id'>,
  type: ChangeType,
  summary: string,
): NewChange {
  return { namespace: row.account_id, type, target: { kind: 'webhook_endpoint', id: row.id }, summary };
}

function writerOf(user: KeyManager, at: string) {
  return { actor: { type: 'user', id: user.subject } as const, requestId: user.requestId, at };
}

export class WebhookEndpoints {
  private readonly now: () => number;

  constructor(
    private readonly db: Db,
    private readonly options: WebhookEndpointsOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  /** Creates an endpoint; its signing secret is in the answer and, sealed, in storage, nowhere else. */
  async createFor(user: KeyManager, input: CreateWebhookEndpointBody): Promise<CreatedWebhookEndpoint> {
    mayActFor(user, input.accountId);
    const url = checkEndpointUrl(input.url, this.options.urls);
    const events = checkEvents(input.events);
    const keys = await this.options.keys();
    const at = new Date(this.now()).toISOString();
    const id = v7();
    const secret = generateSigningSecret();
    const { sealed, keyId } = sealSecret(keys, id, secret);
    const row: WebhookEndpointRow = {
      id,
      account_id: input.accountId,
      url,
      events: JSON.stringify(events),
      description: input.description ?? null,
      status: 'enabled',
      secret_sealed: sealed,
      secret_key_id: keyId,
      created_at: at,
      updated_at: at,
      failing_since: null,
      timeouts_in_a_row: 0,
      pending_deliveries: 0,
    };
    await this.options.writes.run('webhook-endpoint', writerOf(user, at), async (write) => {
      if (await createAccountIfAbsent(write.db, input.accountId, at)) {
        await write.append([accountCreated(input.accountId)]);
      }
      // The account's row lock makes the count and the insert one step: two creations cannot both pass.
      await lockAccount(write.db, input.accountId);
      const held = await write.db
        .selectFrom('webhook_endpoints')
        .select((eb) => eb.fn.countAll<number | string>().as('count'))
        .where('account_id', '=', input.accountId)
        .executeTakeFirstOrThrow();
      if (Number(held.count) >= MAX_WEBHOOK_ENDPOINTS) {
        throw new LimitError(
          `account ${input.accountId} already has ${MAX_WEBHOOK_ENDPOINTS} webhook endpoints, the most an account may have; delete one first`,
        );
      }
      await write.db.insertInto('webhook_endpoints').values(row).execute();
      await insertSubscriptions(write.db, row.id, row.account_id, events);
      await write.append([
        endpointChange(row, 'webhook_endpoint.created', `webhook endpoint ${id} created for ${hostOf(url)}`),
      ]);
    });
    return { ...toWebhookEndpoint(row), secret };
  }

  /** A page of an account's endpoints, oldest first. */
  async listFor(
    user: KeyManager,
    accountId: string,
    request: PageRequest = {},
  ): Promise<WebhookEndpointPage> {
    mayActFor(user, accountId);
    const { rows, meta } = await readPage(
      request,
      async () => {
        const row = await this.db
          .selectFrom('webhook_endpoints')
          .select((eb) => eb.fn.countAll<number | string>().as('count'))
          .where('account_id', '=', accountId)
          .executeTakeFirstOrThrow();
        return Number(row.count);
      },
      (window) =>
        this.db
          .selectFrom('webhook_endpoints')
          .selectAll()
          .where('account_id', '=', accountId)
          .orderBy('created_at')
          .orderBy('id')
          .limit(window.limit)
          .offset(window.offset)
          .execute(),
    );
    return { data: rows.map(toWebhookEndpoint), meta };
  }

  async getFor(user: KeyManager, endpointId: string): Promise<WebhookEndpoint> {
    return toWebhookEndpoint(await this.ownEndpoint(this.db, user, endpointId));
  }

  /** Changes an endpoint's URL, types, description or status: one change of the log. */
  async updateFor(
    user: KeyManager,
    endpointId: string,
    patch: UpdateWebhookEndpointBody,
  ): Promise<WebhookEndpoint> {
    const url = patch.url === undefined ? undefined : checkEndpointUrl(patch.url, this.options.urls);
    const events = patch.events === undefined ? undefined : checkEvents(patch.events);
    const at = new Date(this.now()).toISOString();
    return this.options.writes.run('webhook-endpoint', writerOf(user, at), async (write) => {
      const row = await this.ownEndpoint(write.db, user, endpointId);
      const next: WebhookEndpointRow = {
        ...row,
        ...(url === undefined ? {} : { url }),
        ...(events === undefined ? {} : { events: JSON.stringify(events) }),
        ...(patch.description === undefined ? {} : { description: patch.description }),
        ...(patch.status === undefined ? {} : { status: patch.status }),
      };
      const changed: string[] = [];
      if (next.url !== row.url) changed.push(`url now at ${hostOf(next.url)}`);
      if (next.events !== row.events) changed.push('events changed');
      if (next.description !== row.description) changed.push('description changed');
      if (next.status !== row.status) changed.push(next.status);
      // Nothing changed: nothing is written, no timestamp moves.
      if (changed.length === 0) return toWebhookEndpoint(row);
      const updated: WebhookEndpointRow = {
        ...next,
        updated_at: at,
        // Enabled again: five more days before failures disable it.
        failing_since: next.status === 'enabled' && row.status === 'disabled' ? null : row.failing_since,
      };
      await write.db
        .updateTable('webhook_endpoints')
        .set({
          url: updated.url,
          events: updated.events,
          description: updated.description,
          status: updated.status,
          updated_at: updated.updated_at,
          failing_since: updated.failing_since,
        })
        .where('id', '=', endpointId)
        .execute();
      if (events !== undefined) {
        await write.db.deleteFrom('webhook_subscriptions').where('endpoint_id', '=', endpointId).execute();
        await insertSubscriptions(write.db, endpointId, row.account_id, events);
      }
      const type =
        next.status === 'disabled' && row.status !== 'disabled'
          ? 'webhook_endpoint.disabled'
          : 'webhook_endpoint.updated';
      await write.append([
        endpointChange(row, type, `webhook endpoint ${endpointId}: ${changed.join('; ')}`),
      ]);
      return toWebhookEndpoint(updated);
    });
  }

  /** Deletes an endpoint, with what was due to it and its delivery list; one change of the log. */
  async deleteFor(user: KeyManager, endpointId: string): Promise<void> {
    const at = new Date(this.now()).toISOString();
    await this.options.writes.run('webhook-endpoint', writerOf(user, at), async (write) => {
      const row = await this.ownEndpoint(write.db, user, endpointId);
      // The attempts go with their deliveries, the deliveries and subscriptions with the endpoint.
      await write.db.deleteFrom('webhook_endpoints').where('id', '=', endpointId).execute();
      await write.append([
        endpointChange(
          row,
          'webhook_endpoint.deleted',
          `webhook endpoint ${endpointId} for ${hostOf(row.url)} deleted`,
        ),
      ]);
    });
  }

  /** A page of an endpoint's attempts, newest first. */
  async deliveriesFor(
    user: KeyManager,
    endpointId: string,
    request: PageRequest = {},
  ): Promise<WebhookDeliveryAttemptPage> {
    await this.ownEndpoint(this.db, user, endpointId);
    const { rows, meta } = await readPage(
      request,
      async () => {
        const row = await this.db
          .selectFrom('webhook_attempts')
          .select((eb) => eb.fn.countAll<number | string>().as('count'))
          .where('endpoint_id', '=', endpointId)
          .executeTakeFirstOrThrow();
        return Number(row.count);
      },
      (window) =>
        this.db
          .selectFrom('webhook_attempts as a')
          .innerJoin('webhook_deliveries as d', 'd.id', 'a.delivery_id')
          .selectAll('a')
          .select(['d.event_id', 'd.event_type'])
          .where('a.endpoint_id', '=', endpointId)
          .orderBy('a.at', 'desc')
          .orderBy('a.id', 'desc')
          .limit(window.limit)
          .offset(window.offset)
          .execute(),
    );
    return { data: rows.map(toAttempt), meta };
  }

  /**
   * Makes a delivery due again at once, whatever became of it: a failed one gets one more attempt
   * (and retries after it while its schedule has some left), a succeeded one is sent again.
   */
  async retryFor(user: KeyManager, endpointId: string, deliveryId: string): Promise<WebhookDelivery> {
    const endpoint = await this.ownEndpoint(this.db, user, endpointId);
    mustBeEnabled(endpoint);
    const at = new Date(this.now()).toISOString();
    const updated = await this.options.pending.makeDue(this.db, endpointId, deliveryId, at);
    if (!updated) throw new NotFoundError('no such delivery of this webhook endpoint');
    this.options.onDue?.();
    return toWebhookDelivery(updated);
  }

  /** Sends a test event (`webhook.test`) to an endpoint, as a delivery like any other. */
  async testFor(user: KeyManager, endpointId: string): Promise<WebhookDelivery> {
    const endpoint = await this.ownEndpoint(this.db, user, endpointId);
    mustBeEnabled(endpoint);
    const at = new Date(this.now()).toISOString();
    const eventId = v7();
    const row: WebhookDeliveryRow & { change_seq: null } = {
      id: v7(),
      endpoint_id: endpointId,
      change_seq: null,
      event_id: eventId,
      event_type: TEST_EVENT,
      payload: JSON.stringify({
        type: TEST_EVENT,
        timestamp: at,
        data: {
          id: eventId,
          accountId: endpoint.account_id,
          owner: 'account',
          target: { kind: 'webhook_endpoint', id: endpointId },
          summary: 'a test event, sent on request',
        },
      }),
      status: 'pending',
      attempts: 0,
      next_attempt_at: at,
      leased_until: null,
      lease_token: null,
      created_at: at,
      updated_at: at,
    };
    await this.options.pending.insert(this.db, row);
    this.options.onDue?.();
    return toWebhookDelivery(row);
  }

  /**
   * Disables an endpoint whose attempts have failed, with no success, since `failingSince` (the
   * service's own change of the log, D28). Nothing when it was disabled, or succeeded, meanwhile.
   */
  async disableFailing(
    endpointId: string,
    failingSince: string,
    actor: ChangeActor = { type: 'service' },
  ): Promise<boolean> {
    const at = new Date(this.now()).toISOString();
    return this.options.writes.run('webhook-endpoint', { actor, at }, async (write) => {
      const disabled = await write.db
        .updateTable('webhook_endpoints')
        .set({ status: 'disabled', updated_at: at })
        .where('id', '=', endpointId)
        .where('status', '=', 'enabled')
        .where('failing_since', '=', failingSince)
        .returning(['id', 'account_id'])
        .executeTakeFirst();
      if (!disabled) return false;
      await write.append([
        endpointChange(
          disabled,
          'webhook_endpoint.disabled',
          `webhook endpoint ${endpointId} disabled: every delivery attempt failed since ${failingSince}`,
        ),
      ]);
      return true;
    });
  }

  /** An endpoint of an account the user may act for; 404 for any other, as if it did not exist. */
  private async ownEndpoint(db: Db, user: KeyManager, endpointId: string): Promise<WebhookEndpointRow> {
    const row = await db
      .selectFrom('webhook_endpoints')
      .selectAll()
      .where('id', '=', endpointId)
      .executeTakeFirst();
    if (!row || !user.accounts.includes(row.account_id)) throw new NotFoundError('no such webhook endpoint');
    return row;
  }
}

function mustBeEnabled(endpoint: WebhookEndpointRow): void {
  if (endpoint.status !== 'enabled') {
    throw new ConflictError(
      'the webhook endpoint is disabled: enable it (PATCH status enabled) before sending to it',
      'endpoint_disabled',
    );
  }
}

async function insertSubscriptions(db: Db, endpointId: string, accountId: string, events: readonly string[]) {
  await db
    .insertInto('webhook_subscriptions')
    .values(events.map((event_type) => ({ endpoint_id: endpointId, account_id: accountId, event_type })))
    .execute();
}
