import { type Static, Type } from '@sinclair/typebox';
import { DateTime, Page, PageQuery, REQUEST_ID_PATTERN, StringEnum, Uuid } from './common.js';
import { AccountId } from './identity.js';

/**
 * What a change of the log did (docs/design.md, "The change log"); the audit list names each event by
 * it. `catalog.updated` and `resource.updated` are changes of fields alone (a name, a status, facets);
 * `api_key.updated` a change of a key's name, expiry or restrictions, `api_key.expiring` a key's expiry 7
 * days or 1 day away (D32).
 * `webhook_endpoint.*` are an account's webhook endpoints (D28): created, updated (its URL, types,
 * description, or enabled again), disabled (by a user, or by the service after five days of failures)
 * and deleted.
 */
export const CHANGE_TYPES = [
  'catalog.created',
  'catalog.updated',
  'catalog.version_published',
  'catalog.archived',
  'resource.created',
  'resource.updated',
  'resource.version_published',
  'resource.archived',
  'api_key.created',
  'api_key.rolled',
  'api_key.revoked',
  'api_key.leak_revoked',
  'api_key.updated',
  'api_key.expiring',
  'account.created',
  'account.plan_changed',
  'webhook_endpoint.created',
  'webhook_endpoint.updated',
  'webhook_endpoint.disabled',
  'webhook_endpoint.deleted',
] as const;

/** The longest actor id an event can hold, and so the longest the `actor` filter takes. */
const MAX_ACTOR_ID = 2048;

export const AUDIT_ACTOR_TYPES = ['api-key', 'user', 'operator', 'leak-report', 'service'] as const;

export const AuditEvent = Type.Object(
  {
    id: Uuid,
    at: DateTime,
    accountId: AccountId,
    actor: Type.Object({
      type: StringEnum(AUDIT_ACTOR_TYPES, {
        description:
          'api-key or user for callers of the API; operator for the command line; leak-report for a revocation by leak report; service for what the service does by itself (a webhook endpoint disabled after failing for five days, an API key expiry notice)',
      }),
      id: Type.Optional(
        Type.String({
          maxLength: MAX_ACTOR_ID,
          description: 'the key id, the user (token subject), or the leak URL',
        }),
      ),
    }),
    action: StringEnum(CHANGE_TYPES),
    target: Type.String({
      maxLength: 300,
      pattern: '^(?:catalog|resource|api-key|account|webhook_endpoint):[^\\s]{1,280}$',
      description:
        'what it was done to, by kind and human ref or id: catalog:org/handbook, resource:org/handbook/intro, api-key:<keyId>, account:<accountId>, webhook_endpoint:<id>',
    }),
    requestId: Type.Optional(
      Type.String({
        maxLength: 128,
        pattern: REQUEST_ID_PATTERN,
        description: 'the x-request-id of the write',
      }),
    ),
    summary: Type.String({ maxLength: 1000, description: 'what changed, in one line' }),
  },
  { title: 'AuditEvent' },
);
export type AuditEvent = Static<typeof AuditEvent>;

export const AuditEventPage = Page(AuditEvent, {
  description: "One page of an account's audit events, newest first",
});
export type AuditEventPage = Static<typeof AuditEventPage>;

/**
 * D33: the audit list's filters. `action` takes change types, repeated or comma-separated (D3);
 * `actor` is an actor's id as events show it; `from` and `to` bound `at`, `from` included and `to`
 * left out, so that consecutive windows meet without overlap.
 */
export const ListAuditEventsQuery = Type.Object(
  {
    accountId: AccountId,
    action: Type.Optional(
      Type.Array(StringEnum(CHANGE_TYPES), {
        maxItems: CHANGE_TYPES.length,
        description: 'only events of these actions; repeat or comma-separate',
      }),
    ),
    actor: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: MAX_ACTOR_ID,
        description: "only events whose actor's id is this: a key id, a user (token subject) or a leak URL",
      }),
    ),
    from: Type.Optional({ ...DateTime, description: 'only events at or after this time' }),
    to: Type.Optional({ ...DateTime, description: 'only events before this time' }),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type ListAuditEventsQuery = Static<typeof ListAuditEventsQuery>;

/** Which events of an account a list shows (D33); every field left out lets every event through. */
export type AuditFilter = Pick<ListAuditEventsQuery, 'action' | 'actor' | 'from' | 'to'>;
