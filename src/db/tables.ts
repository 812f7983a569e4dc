import { type ColumnType, type Insertable, type Kysely, type Selectable, SqliteAdapter } from 'kysely';
import type { Environment } from '../schemas/api-key-format.js';
import type { LifecycleStatus } from '../schemas/common.js';
import type { ResourceKind, StorageBackend, VersionStatus } from '../schemas/playbook.js';
import type {
  WebhookDeliveryStatus,
  WebhookEndpointStatus,
  WebhookFailureReason,
} from '../schemas/webhooks.js';

/**
 * Table types, typed by the contract: a column that holds one of the contract's enums has that enum's
 * type (every write goes through these types, so every read may rely on them). Timestamps are stored
 * as ISO 8601 UTC text in one fixed form (`toISOString()`), so that they sort as text and read back the
 * same on SQLite and PostgreSQL. JSON columns hold JSON text.
 */
export interface AccountTable {
  id: string;
  name: string | null;
  plan: string;
  created_at: string;
  updated_at: string;
}

export interface CatalogTable {
  id: string;
  /** null for a service-owned Catalog. */
  account_id: string | null;
  slug: string;
  name: string;
  status: LifecycleStatus;
  description: string | null;
  facets: string | null;
  current_version_id: string | null;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

/** One row per facet value of a Catalog, so that facet filters are plain indexed lookups on every dialect. */
export interface CatalogFacetValueTable {
  catalog_id: string;
  facet: string;
  value: string;
}

export interface CatalogVersionTable {
  id: string;
  catalog_id: string;
  version: string;
  manifest_hash: string;
  resource_count: number;
  published_at: string | null;
  created_at: string;
}

/**
 * A Catalog version's pins: their JSON text in parts, each read by its key (catalog/stored-pins.ts).
 * A version of 100,000 Resources pins 20 MB, which no statement reads at once.
 */
export interface CatalogVersionPinsTable {
  version_id: string;
  /** 0, 1, 2…: the parts in the order of the text. */
  part: number;
  json: string;
}

export interface ResourceTable {
  id: string;
  catalog_id: string;
  slug: string;
  kind: ResourceKind;
  title: string;
  status: LifecycleStatus;
  description: string | null;
  facets: string | null;
  manifest: string;
  current_version_id: string | null;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export interface ResourceVersionTable {
  id: string;
  resource_id: string;
  version: string;
  content_hash: string;
  content_size_bytes: number;
  media_type: string;
  storage_backend: StorageBackend;
  status: VersionStatus;
  manifest: string;
  published_at: string | null;
  superseded_at: string | null;
  archived_at: string | null;
  created_at: string;
}

/** Content kept in the database (`database-text`), addressed by its SHA-256. */
export interface ContentBlobTable {
  content_hash: string;
  body: string;
}

/** An API key (D8): never the key string or its secret, only the secret's SHA-256. */
export interface ApiKeyTable {
  /** The key id of the key string. */
  id: string;
  account_id: string;
  name: string;
  /** JSON array of scope names. */
  scopes: string;
  environment: Environment;
  secret_hash: string;
  /** The user (token subject) who created the key. */
  created_by: string;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
  last_used_at: string | null;
  /** The key a roll minted to replace this one (D29: a key is rolled once). */
  replaced_by: string | null;
  /** D32: the canonical JSON text of the key's restrictions; null for none. */
  restrictions: string | null;
  /** D32: the client address of the key's last use (beside `last_used_at`). */
  last_used_address: string | null;
}

/**
 * D32: how a key answered in one hour (`bucket_start`, an RFC 3339 time on the hour), each outcome
 * counted; every instance adds its counts to the one row.
 */
export interface ApiKeyUsageTable {
  key_id: string;
  bucket_start: string;
  success: number | string;
  client_error: number | string;
  unauthorized: number | string;
  rate_limited: number | string;
  server_error: number | string;
}

/**
 * D32: the expiry notices of keys, one row per key, expiry and threshold (`7d`, `1d`) accounted for:
 * `noticed_at` when its `api_key.expiring` change was made, null for a threshold already crossed when
 * the expiry was set (no notice is made for it). The primary key makes each notice once, whatever the
 * number of instances.
 */
export interface ApiKeyExpiryNoticeTable {
  key_id: string;
  expires_at: string;
  threshold: string;
  noticed_at: string | null;
}

/**
 * One row: the change log's head, the `seq` of its last change. A write that appends changes advances
 * it in its transaction, which makes writers commit in the order of their changes.
 */
export interface DataGenerationTable {
  id: number;
  generation: number;
}

/**
 * The change log: what every write changed, one row per change, in the write's own transaction, never
 * changed or removed. `seq` is the order of commits (see changes/change-log.ts).
 */
export interface ChangeTable {
  /** bigint on PostgreSQL, whose driver reads it as text. */
  seq: ColumnType<number | string, number, never>;
  id: string;
  at: string;
  namespace: string;
  type: string;
  target_kind: string;
  target_id: string;
  target_ref: string | null;
  actor_type: 'api-key' | 'user' | 'operator' | 'leak-report' | 'service';
  actor_id: string | null;
  request_id: string | null;
  summary: string;
}

/**
 * The read model of a Resource's detail (D30, migration 0013): its answer's text and version tag, whose
 * it is and its facets. `n` exists on SQLite alone (the rowid the row is stored by).
 */
export interface StoredDetailTable {
  resource_id: string;
  catalog_id: string;
  account_id: string | null;
  facets: string | null;
  form: string;
  tag: string;
  body: string;
}

/** How far the stored details follow the change log (one row, `id` 1). */
export interface StoredDetailsFollowedTable {
  id: number;
  /** bigint on PostgreSQL, whose driver reads it as text. */
  seq: ColumnType<number | string, number, number>;
}

/** An account's webhook endpoint (D28): its signing secret sealed, never in the clear or hashed. */
export interface WebhookEndpointTable {
  id: string;
  account_id: string;
  url: string;
  /** JSON array of change types, or `["*"]`. */
  events: string;
  description: string | null;
  status: WebhookEndpointStatus;
  /** The signing secret sealed under the deployment key `secret_key_id` names (webhooks/secret-box.ts). */
  secret_sealed: string;
  secret_key_id: string;
  created_at: string;
  updated_at: string;
  failing_since: string | null;
  /**
   * Attempts that timed out in a row (D28): from three on, the endpoint is tried one attempt at a
   * time with a short timeout, until a 2xx sets it back to 0.
   */
  timeouts_in_a_row: ColumnType<number, number | undefined, number>;
  /** Its deliveries `pending`, kept with every change of one (webhooks/pending-bound.ts). */
  pending_deliveries: ColumnType<number, number | undefined, number>;
}

/** One row per endpoint and change type it takes (`*` for every type), with the endpoint's account. */
export interface WebhookSubscriptionTable {
  endpoint_id: string;
  account_id: string;
  event_type: string;
}

/** What is due to an endpoint: one change (or a test event), until it succeeds or fails for good. */
export interface WebhookDeliveryTable {
  id: string;
  endpoint_id: string;
  /** bigint on PostgreSQL, whose driver reads it as text; null for a test event. */
  change_seq: ColumnType<number | string | null, number | null | undefined, never>;
  event_id: string;
  event_type: string;
  /** The body of a test event; a change's is made from the change when sent. */
  payload: string | null;
  status: WebhookDeliveryStatus;
  attempts: number;
  next_attempt_at: string;
  leased_until: string | null;
  lease_token: string | null;
  created_at: string;
  updated_at: string;
}

/** One attempt of a delivery, as the deliveries list shows it. */
export interface WebhookAttemptTable {
  id: string;
  delivery_id: string;
  endpoint_id: string;
  attempt: number;
  at: string;
  outcome: 'succeeded' | 'failed';
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  next_attempt_at: string | null;
  /** Why it failed, in one word; null when it succeeded, or when the row was kept without one. */
  reason: WebhookFailureReason | null;
}

export interface Database {
  accounts: AccountTable;
  catalogs: CatalogTable;
  catalog_facet_values: CatalogFacetValueTable;
  catalog_versions: CatalogVersionTable;
  catalog_version_pins: CatalogVersionPinsTable;
  resources: ResourceTable;
  resource_versions: ResourceVersionTable;
  content_blobs: ContentBlobTable;
  api_keys: ApiKeyTable;
  api_key_usage: ApiKeyUsageTable;
  api_key_expiry_notices: ApiKeyExpiryNoticeTable;
  data_generation: DataGenerationTable;
  changes: ChangeTable;
  webhook_endpoints: WebhookEndpointTable;
  webhook_subscriptions: WebhookSubscriptionTable;
  webhook_deliveries: WebhookDeliveryTable;
  webhook_attempts: WebhookAttemptTable;
  stored_details: StoredDetailTable;
  stored_details_followed: StoredDetailsFollowedTable;
}

export type Db = Kysely<Database>;

/** The SQL dialects the service runs on: the embedded default, and production. */
export type Dialect = 'sqlite' | 'postgres';

/** The dialect `db` (or a transaction of it) speaks: what the few statements written for one ask. */
export function dialectOf(db: Db): Dialect {
  return db.getExecutor().adapter instanceof SqliteAdapter ? 'sqlite' : 'postgres';
}

export type CatalogRow = Selectable<CatalogTable>;
export type CatalogVersionRow = Selectable<CatalogVersionTable>;
export type ResourceRow = Selectable<ResourceTable>;
export type ResourceVersionRow = Selectable<ResourceVersionTable>;
export type ApiKeyRow = Selectable<ApiKeyTable>;
export type NewApiKey = Insertable<ApiKeyTable>;
export type ChangeRow = Selectable<ChangeTable>;
export type WebhookEndpointRow = Selectable<WebhookEndpointTable>;
export type WebhookDeliveryRow = Selectable<WebhookDeliveryTable>;
export type WebhookAttemptRow = Selectable<WebhookAttemptTable>;
