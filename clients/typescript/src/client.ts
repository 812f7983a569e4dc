import { parseApiKey } from './api-key.js';
import type { components, operations } from './openapi.js';
import { isLoopbackUrl } from './origins.js';
import { everyItem } from './pages.js';
import { PlaybookSync } from './sync.js';
import {
  type Call,
  type CallOptions,
  MemoryCache,
  type PlaybookCache,
  type ResponseInfo,
  Transport,
  type Written,
} from './transport.js';
import { webhookEndpointsOf } from './webhook-endpoints.js';

export type { CallOptions } from './transport.js';

type Schemas = components['schemas'];
type Json<Op extends keyof operations, Status extends number> = operations[Op]['responses'] extends {
  [S in Status]: { content: { 'application/json': infer Body } };
}
  ? Body
  : never;
type Query<Op extends keyof operations> = NonNullable<operations[Op]['parameters']['query']>;
type Body<Op extends keyof operations> = operations[Op] extends {
  requestBody?: { content: { 'application/json': infer B } };
}
  ? B
  : never;

export type Catalog = Schemas['Catalog'];
export type Resource = Schemas['Resource'];
export type ResourceListItem = Schemas['ResourceListItem'];
export type ResourceVersion = Schemas['ResourceVersion'];
export type ResourceVersionSummary = Schemas['ResourceVersionSummary'];
export type Problem = Schemas['Problem'];
export type CatalogPage = Json<'listPlaybookCatalogs', 200>;
export type ResourcePage = Json<'listPlaybookCatalogResources', 200>;
export type VersionPage = Json<'listPlaybookResourceVersions', 200>;
export type ApiKeyPage = Json<'listApiKeys', 200>;
export type ApiKey = ApiKeyPage['data'][number];
export type CreatedApiKey = Json<'createApiKey', 201>;
export type CreateApiKeyInput = Body<'createApiKey'>;
export type RollApiKeyInput = NonNullable<Body<'rollApiKey'>>;
/** A change of a key's name, expiry or restrictions, as a JSON Merge Patch: `null` lifts a field. */
export type UpdateApiKeyInput =
  operations['updateApiKey']['requestBody']['content']['application/merge-patch+json'];
export type KeyRestrictions = NonNullable<ApiKey['restrictions']>;
export type ApiKeyUsage = Json<'getApiKeyUsage', 200>;
export type ApiKeyUsageQuery = Query<'getApiKeyUsage'>;
export type CatalogQuery = Query<'listPlaybookCatalogs'>;
export type ResourceQuery = Query<'listPlaybookCatalogResources'>;
export type VersionQuery = Query<'listPlaybookResourceVersions'>;
export type ApiKeyQuery = Query<'listApiKeys'>;
export type Owner = operations['listPlaybookCatalogResources']['parameters']['path']['owner'];
export type CatalogInput = Body<'putCatalog'>;
export type ResourceInput = Body<'putResource'>;
export type PublishReport = Json<'putCatalog', 200>;
export type ResourceWriteReport = Json<'putResource', 200>;
export type AuditEventPage = Json<'listAuditEvents', 200>;
export type AuditEvent = AuditEventPage['data'][number];
export type AuditEventQuery = Query<'listAuditEvents'>;
export type Me = Json<'getMe', 200>;
export type DevSignInInput = Body<'devSignIn'>;
export type DevSignInToken = Json<'devSignIn', 200>;
export type { Written };

/** Options of a write: its preconditions. */
export interface WriteOptions extends CallOptions {
  /** The ETag the write is based on: the service answers 412 when the object changed since. */
  readonly ifMatch?: string;
  /** Only create: 412 when the object exists. */
  readonly createOnly?: boolean;
}

export interface PlaybookOptions {
  /** A secret API key (`svc_sk_…`), sent as `x-api-key`; server-side code only. */
  readonly apiKey?: string;
  /** A user access token, sent as `Authorization: Bearer`; key management needs one. */
  readonly accessToken?: string;
  /**
   * Where the service is: `https://playbook.example.com`. Plain `http:` is taken for a loopback host
   * only (`localhost`, `*.localhost`, 127.0.0.0/8, `[::1]`, judged by the URL's text, never resolved),
   * unless `allowInsecureHttp` says otherwise.
   */
  readonly baseUrl: string;
  /**
   * Sends the key or token over plain `http:` to a host that is not loopback. Anyone on the way can
   * read the credential and use it: for a network you trust end to end, never the internet. Off by
   * default, when such a `baseUrl` is refused with a `TypeError` before anything is sent.
   *
   * @example
   * new Playbook({ apiKey, baseUrl: 'http://playbook.lab.internal:8080', allowInsecureHttp: true });
   */
  readonly allowInsecureHttp?: boolean;
  /** The account to act for, sent as `x-account-id` (an access token listing several needs it). */
  readonly accountId?: string;
  /** How long one attempt may take before it is abandoned (and retried when that is safe); 30 s. */
  readonly timeoutMs?: number;
  /** Retries after the first attempt; 3. Zero turns retrying off. */
  readonly maxRetries?: number;
  /** The first backoff ceiling; it doubles per retry. 250 ms. */
  readonly retryBaseMs?: number;
  /** No single wait is longer: a `Retry-After` beyond it ends the call with the error. 20 s. */
  readonly maxRetryDelayMs?: number;
  /** `true` for an in-memory cache, or a store of your own: reads revalidate with `If-None-Match`. */
  readonly cache?: boolean | PlaybookCache;
  /**
   * The `fetch` to use; Node's own by default. It is asked for `redirect: 'manual'`: the client follows
   * a redirect itself, within the same https origin only.
   */
  readonly fetch?: typeof fetch;
  /** Told of every final answer: status, request id, rate-limit budget, whether it came from cache. */
  readonly onResponse?: (info: ResponseInfo) => void;
}

const segment = encodeURIComponent;

/**
 * The Playbook API.
 *
 * @example
 * const playbook = new Playbook({ apiKey: process.env.PLAYBOOK_API_KEY, baseUrl: 'https://playbook.example.com' });
 * for await (const catalog of playbook.catalogs.iterate()) console.log(catalog.slug);
 */
export class Playbook {
  private readonly transport: Transport;
  /** The sync feed: everything the caller sees, then what changed (see `PlaybookSync`). */
  readonly sync: PlaybookSync;

  constructor(options: PlaybookOptions) {
    const { apiKey, accessToken } = options;
    if ((apiKey === undefined) === (accessToken === undefined)) {
      throw new TypeError('Playbook: give exactly one of apiKey and accessToken');
    }
    if (apiKey !== undefined && !parseApiKey(apiKey)?.checksumValid) {
      // The key itself is never part of a message.
      throw new TypeError('Playbook: apiKey is not a valid API key (its format or checksum does not hold)');
    }
    checkBaseUrl(options);
    const credential =
      apiKey !== undefined
        ? { header: 'x-api-key', value: apiKey, cacheName: async () => `key:${parseApiKey(apiKey)!.keyId}` }
        : { header: 'authorization', value: `Bearer ${accessToken}`, cacheName: digestName(accessToken!) };
    const cache = options.cache === true ? new MemoryCache() : options.cache || undefined;
    this.transport = new Transport({
      baseUrl: withSlash(options.baseUrl),
      credential,
      accountId: options.accountId,
      timeoutMs: options.timeoutMs ?? 30_000,
      maxRetries: options.maxRetries ?? 3,
      retryBaseMs: options.retryBaseMs ?? 250,
      maxRetryDelayMs: options.maxRetryDelayMs ?? 20_000,
      cache,
      fetch: options.fetch ?? globalThis.fetch,
      onResponse: options.onResponse,
    });
    this.sync = new PlaybookSync(this.transport);
  }

  private write<T>(
    operation: string,
    method: 'PUT' | 'POST' | 'DELETE',
    path: string,
    body: unknown,
    options: WriteOptions & { readonly query?: Call['query'] },
  ): Promise<Written<T>> {
    const headers: Record<string, string> = {};
    if (options.ifMatch !== undefined) headers['if-match'] = options.ifMatch;
    if (options.createOnly) headers['if-none-match'] = '*';
    return this.transport.exchange<T>({
      operation,
      method,
      path,
      query: options.query,
      body,
      // A PUT or DELETE of the same thing twice leaves the same state: safe to send again.
      idempotent: method !== 'POST',
      signal: options.signal,
      headers,
      callerHeaders: options.headers,
    });
  }

  private get<T>(operation: string, path: string, query: Call['query'], options: CallOptions): Promise<T> {
    return this.transport.send<T>({
      operation,
      method: 'GET',
      path,
      query,
      idempotent: true,
      signal: options.signal,
      callerHeaders: options.headers,
    });
  }

  /** Catalogs the caller may read (the service's and its account's), and your account's to publish. */
  readonly catalogs = {
    list: (query: CatalogQuery = {}, options: CallOptions = {}): Promise<CatalogPage> =>
      this.get('listPlaybookCatalogs', 'v3/playbook/catalogs', query, options),
    iterate: (
      query: CatalogQuery = {},
      options: CallOptions = {},
    ): AsyncGenerator<Catalog, void, undefined> =>
      everyItem((page) => this.catalogs.list({ ...query, page }, options), query.page),
    /**
     * One Catalog by its human ref: `svc` for the service's, `org` for your account's.
     *
     * @example
     * const handbook = await playbook.catalogs.get('svc', 'handbook');
     * console.log(handbook.currentVersion?.resourcePins.length);
     */
    get: (owner: Owner, catalogSlug: string, options: CallOptions = {}): Promise<Catalog> =>
      this.get(
        'getPlaybookCatalog',
        `v3/playbook/catalogs/${segment(owner)}/${segment(catalogSlug)}`,
        undefined,
        options,
      ),
    /**
     * Publishes a whole Catalog of your account: Resources left out are archived, and a change of
     * pins publishes a Catalog version under `input.version`. `dryRun` reports and writes nothing.
     */
    put: (
      catalogSlug: string,
      input: CatalogInput,
      options: WriteOptions & { readonly dryRun?: boolean } = {},
    ): Promise<Written<PublishReport>> =>
      this.write('putCatalog', 'PUT', `v3/playbook/catalogs/org/${segment(catalogSlug)}`, input, {
        ...options,
        ...(options.dryRun ? { query: { dryRun: true } } : {}),
      }),
    /** Publishes a Catalog version pinning the current versions of its active Resources. */
    publishVersion: (
      catalogSlug: string,
      version: string,
      options: WriteOptions = {},
    ): Promise<Written<Catalog>> =>
      this.write(
        'publishCatalogVersion',
        'POST',
        `v3/playbook/catalogs/org/${segment(catalogSlug)}/versions`,
        { version },
        options,
      ),
    /** Archives a Catalog of your account; idempotent. */
    archive: async (catalogSlug: string, options: WriteOptions = {}): Promise<void> => {
      await this.write(
        'archiveCatalog',
        'DELETE',
        `v3/playbook/catalogs/org/${segment(catalogSlug)}`,
        undefined,
        options,
      );
    },
  };

  /** Resources: a Catalog's list, one Resource, and its versions. */
  readonly resources = {
    list: (
      owner: Owner,
      catalogSlug: string,
      query: ResourceQuery = {},
      options: CallOptions = {},
    ): Promise<ResourcePage> =>
      this.get(
        'listPlaybookCatalogResources',
        `v3/playbook/catalogs/${segment(owner)}/${segment(catalogSlug)}/resources`,
        query,
        options,
      ),
    iterate: (
      owner: Owner,
      catalogSlug: string,
      query: ResourceQuery = {},
      options: CallOptions = {},
    ): AsyncGenerator<ResourceListItem, void, undefined> =>
      everyItem((page) => this.resources.list(owner, catalogSlug, { ...query, page }, options), query.page),
    get: (resourceId: string, options: CallOptions = {}): Promise<Resource> =>
      this.get('getPlaybookResource', `v3/playbook/resources/${segment(resourceId)}`, undefined, options),
    /**
     * One Resource by its human ref, `owner/catalogSlug/resourceSlug`: the same detail as `get`.
     *
     * @example
     * const intro = await playbook.resources.getByRef('svc', 'handbook', 'intro');
     * console.log(intro.currentVersion.content);
     */
    getByRef: (
      owner: Owner,
      catalogSlug: string,
      resourceSlug: string,
      options: CallOptions = {},
    ): Promise<Resource> =>
      this.get(
        'getPlaybookResourceByRef',
        `v3/playbook/catalogs/${segment(owner)}/${segment(catalogSlug)}/resources/${segment(resourceSlug)}`,
        undefined,
        options,
      ),
    versions: (
      resourceId: string,
      query: VersionQuery = {},
      options: CallOptions = {},
    ): Promise<VersionPage> =>
      this.get(
        'listPlaybookResourceVersions',
        `v3/playbook/resources/${segment(resourceId)}/versions`,
        query,
        options,
      ),
    iterateVersions: (
      resourceId: string,
      query: VersionQuery = {},
      options: CallOptions = {},
    ): AsyncGenerator<ResourceVersionSummary, void, undefined> =>
      everyItem((page) => this.resources.versions(resourceId, { ...query, page }, options), query.page),
    /** Publishes one Resource of an existing Catalog of your account; publishes no Catalog version. */
    put: (
      catalogSlug: string,
      resourceSlug: string,
      input: ResourceInput,
      options: WriteOptions = {},
    ): Promise<Written<ResourceWriteReport>> =>
      this.write(
        'putResource',
        'PUT',
        `v3/playbook/catalogs/org/${segment(catalogSlug)}/resources/${segment(resourceSlug)}`,
        input,
        options,
      ),
    /** Archives a Resource of your account; idempotent. */
    archive: async (catalogSlug: string, resourceSlug: string, options: WriteOptions = {}): Promise<void> => {
      await this.write(
        'archiveResource',
        'DELETE',
        `v3/playbook/catalogs/org/${segment(catalogSlug)}/resources/${segment(resourceSlug)}`,
        undefined,
        options,
      );
    },
  };

  /** One Resource Version, with its content. */
  readonly versions = {
    get: (resourceId: string, versionId: string, options: CallOptions = {}): Promise<ResourceVersion> =>
      this.get(
        'getPlaybookResourceVersion',
        `v3/playbook/resources/${segment(resourceId)}/versions/${segment(versionId)}`,
        undefined,
        options,
      ),
  };

  /** The audit trail of an account, with an access token of one of its users. */
  readonly auditEvents = {
    list: (query: AuditEventQuery, options: CallOptions = {}): Promise<AuditEventPage> =>
      this.get('listAuditEvents', 'v3/identity/audit-events', query, options),
    iterate: (
      query: AuditEventQuery,
      options: CallOptions = {},
    ): AsyncGenerator<AuditEvent, void, undefined> =>
      everyItem((page) => this.auditEvents.list({ ...query, page }, options), query.page),
  };

  /**
   * Who the access token is, and the accounts it lets the user act for, with their names and plans.
   *
   * @example
   * const me = await playbook.me();
   * console.log(me.user.id, me.accounts.map((account) => account.id));
   */
  readonly me = (options: CallOptions = {}): Promise<Me> =>
    this.get('getMe', 'v3/identity/me', undefined, options);

  /** Webhook endpoints of an account, with an access token of one of its users (webhook-endpoints.ts). */
  readonly webhookEndpoints = webhookEndpointsOf(() => this.transport);

  /** Key management, with an access token. */
  readonly apiKeys = {
    /** Mints a key; the answer's `key` is shown once. Not retried after a failure of unknown outcome. */
    create: (input: CreateApiKeyInput, options: CallOptions = {}): Promise<CreatedApiKey> =>
      this.transport.send({
        operation: 'createApiKey',
        method: 'POST',
        path: 'v3/identity/api-keys',
        body: input,
        idempotent: false,
        signal: options.signal,
        callerHeaders: options.headers,
      }),
    list: (query: ApiKeyQuery, options: CallOptions = {}): Promise<ApiKeyPage> =>
      this.get('listApiKeys', 'v3/identity/api-keys', query, options),
    iterate: (query: ApiKeyQuery, options: CallOptions = {}): AsyncGenerator<ApiKey, void, undefined> =>
      everyItem((page) => this.apiKeys.list({ ...query, page }, options), query.page),
    /** One key of an account the token's user may act for. */
    get: (keyId: string, options: CallOptions = {}): Promise<ApiKey> =>
      this.get('getApiKey', `v3/identity/api-keys/${segment(keyId)}`, undefined, options),
    /**
     * Changes a key's name, expiry or restrictions (a JSON Merge Patch: what is left out is unchanged,
     * `null` lifts it). Idempotent, so retried like a read.
     */
    update: (keyId: string, input: UpdateApiKeyInput, options: CallOptions = {}): Promise<ApiKey> =>
      this.transport.send({
        operation: 'updateApiKey',
        method: 'PATCH',
        path: `v3/identity/api-keys/${segment(keyId)}`,
        body: input,
        idempotent: true,
        signal: options.signal,
        callerHeaders: options.headers,
      }),
    /** How a key was used: its answers by day (or hour) and outcome, and its last use. */
    usage: (keyId: string, query: ApiKeyUsageQuery = {}, options: CallOptions = {}): Promise<ApiKeyUsage> =>
      this.get('getApiKeyUsage', `v3/identity/api-keys/${segment(keyId)}/usage`, query, options),
    /** Revokes a key; idempotent, so retried like a read. */
    revoke: (keyId: string, options: CallOptions = {}): Promise<void> =>
      this.transport.send({
        operation: 'revokeApiKey',
        method: 'DELETE',
        path: `v3/identity/api-keys/${segment(keyId)}`,
        idempotent: true,
        signal: options.signal,
        callerHeaders: options.headers,
      }),
    /** Replaces a key; the old one works for `overlapSeconds` (one day by default), then expires. */
    roll: (keyId: string, input: RollApiKeyInput = {}, options: CallOptions = {}): Promise<CreatedApiKey> =>
      this.transport.send({
        operation: 'rollApiKey',
        method: 'POST',
        path: `v3/identity/api-keys/${segment(keyId)}/roll`,
        body: input,
        idempotent: false,
        signal: options.signal,
        callerHeaders: options.headers,
      }),
  };
}

/** Where the service is, as `Playbook` and `signInForDevelopment` take it. */
type Location = Pick<PlaybookOptions, 'baseUrl' | 'allowInsecureHttp'>;

/** Refuses a `baseUrl` a credential must not be sent to (D14), before anything is sent. */
function checkBaseUrl(options: Location): void {
  const baseUrl = URL.canParse(options.baseUrl) ? new URL(options.baseUrl) : undefined;
  if (!baseUrl || (baseUrl.protocol !== 'https:' && baseUrl.protocol !== 'http:')) {
    throw new TypeError('Playbook: baseUrl must be an http(s) URL, e.g. https://playbook.example.com');
  }
  if (baseUrl.username !== '' || baseUrl.password !== '') {
    // fetch refuses such a URL, and the URL itself would show in every message; neither part is sent.
    throw new TypeError(
      'Playbook: baseUrl may not hold a user name or password: the API key is the credential',
    );
  }
  if (baseUrl.protocol === 'http:' && !isLoopbackUrl(baseUrl) && options.allowInsecureHttp !== true) {
    throw new TypeError(
      `Playbook: baseUrl is plain http to ${baseUrl.host}, which is not loopback: the credential would cross the network readable by anyone on the way; use https, or allowInsecureHttp: true to send it anyway`,
    );
  }
}

function withSlash(baseUrl: string): string {
  return baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
}

/**
 * Signs in for development: a short-lived user access token from a `test` deployment that signs its
 * own tokens, for the user and accounts given, as `playbook token` mints one. The service answers
 * clients on its own machine only, unless it is started with `PLAYBOOK_DEV_SIGN_IN=true`; a `live`
 * deployment has no such operation (404). Sent once, never retried: each call mints a token.
 *
 * @example
 * const { accessToken } = await signInForDevelopment(
 *   { baseUrl: 'http://127.0.0.1:8080' },
 *   { user: 'ada', accounts: ['demo'] },
 * );
 * const playbook = new Playbook({ accessToken, baseUrl: 'http://127.0.0.1:8080' });
 */
export async function signInForDevelopment(
  options: Location & Pick<PlaybookOptions, 'fetch' | 'timeoutMs'>,
  input: DevSignInInput,
  call: CallOptions = {},
): Promise<DevSignInToken> {
  checkBaseUrl(options);
  const transport = new Transport({
    baseUrl: withSlash(options.baseUrl),
    credential: undefined,
    accountId: undefined,
    timeoutMs: options.timeoutMs ?? 30_000,
    maxRetries: 0,
    retryBaseMs: 250,
    maxRetryDelayMs: 20_000,
    cache: undefined,
    fetch: options.fetch ?? globalThis.fetch,
    onResponse: undefined,
  });
  return transport.send({
    operation: 'devSignIn',
    method: 'POST',
    path: 'v3/identity/dev-sign-in',
    body: input,
    idempotent: false,
    signal: call.signal,
    callerHeaders: call.headers,
  });
}

/** A cache name for a token that does not hold the token: the hex SHA-256 of it, computed once. */
function digestName(token: string): () => Promise<string> {
  let name: Promise<string> | undefined;
  return () => {
    name ??= crypto.subtle
      .digest('SHA-256', new TextEncoder().encode(token))
      .then(
        (digest) =>
          `token:${Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('')}`,
      );
    return name;
  };
}
