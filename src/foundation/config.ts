import { isIP } from 'node:net';
import path from 'node:path';
import { isLoopbackUrl } from '@playbook/client';
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { MAX_CATALOG_RESOURCES, MAX_CONTENT_BYTES_CEILING } from '../schemas/playbook.js';
import { PROJECT_ROOT } from './project-root.js';

/**
 * Every environment variable the service reads (D13), each with the schema its raw text must meet.
 * Nothing outside this module reads `process.env`.
 */
const EnvSchema = Type.Object({
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  PLAYBOOK_METRICS_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535 })),
  PLAYBOOK_METRICS_HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  PLAYBOOK_DATA_DIR: Type.Optional(Type.String({ minLength: 1 })),
  PLAYBOOK_DATABASE_URL: Type.Optional(
    Type.String({
      pattern: '^(postgres|postgresql)://|^sqlite:',
      description: 'postgres://… or sqlite:<path>',
    }),
  ),
  PLAYBOOK_DATABASE_READ_URL: Type.Optional(
    Type.String({ pattern: '^(postgres|postgresql)://', description: 'postgres://…' }),
  ),
  PLAYBOOK_DATABASE_PREPARED_STATEMENTS: Type.Union([Type.Literal('true'), Type.Literal('false')], {
    default: 'true',
  }),
  PLAYBOOK_CONTENT_STORE: Type.Optional(Type.String({ minLength: 1 })),
  PLAYBOOK_S3_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  PLAYBOOK_ENVIRONMENT: Type.Union([Type.Literal('test'), Type.Literal('live')], { default: 'test' }),
  PLAYBOOK_REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  PLAYBOOK_JWKS_URL: Type.Optional(Type.String({ pattern: '^https?://' })),
  PLAYBOOK_JWT_ISSUER: Type.Optional(Type.String({ minLength: 1 })),
  PLAYBOOK_JWT_AUDIENCE: Type.Optional(Type.String({ minLength: 1 })),
  PLAYBOOK_JWT_ACCOUNTS_CLAIM: Type.String({ minLength: 1, default: 'accounts' }),
  PLAYBOOK_JWT_CLOCK_TOLERANCE_S: Type.Integer({ minimum: 0, maximum: 3600, default: 0 }),
  PLAYBOOK_JWT_MAX_TTL_S: Type.Integer({ minimum: 60, maximum: 31_536_000, default: 86_400 }),
  PLAYBOOK_LEAK_REPORT_KEYS_URL: Type.Optional(Type.String({ pattern: '^https?://' })),
  PLAYBOOK_OIDC_ISSUER: Type.Optional(
    Type.String({ pattern: '^https?://[^\\s]+$', description: "the identity provider's issuer URL" }),
  ),
  PLAYBOOK_OIDC_CLIENT_ID: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
  PLAYBOOK_DEV_SIGN_IN: Type.Union([Type.Literal('true'), Type.Literal('false')], { default: 'false' }),
  PLAYBOOK_MAX_KEYS_PER_ACCOUNT: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 100 }),
  PLAYBOOK_RATE_LIMIT_MAX: Type.Integer({ minimum: 1, maximum: 1_000_000_000, default: 1200 }),
  PLAYBOOK_RATE_LIMIT_WINDOW_MS: Type.Integer({ minimum: 1000, maximum: 86_400_000, default: 60000 }),
  PLAYBOOK_AUTH_FAILURE_MAX: Type.Integer({ minimum: 1, maximum: 1_000_000_000, default: 100 }),
  PLAYBOOK_TRUST_PROXY: Type.String({
    default: 'false',
    description: 'false, true, a hop count, or comma-separated proxy addresses/CIDRs',
  }),
  PLAYBOOK_SHUTDOWN_DELAY_MS: Type.Integer({ minimum: 0, maximum: 600_000, default: 0 }),
  PLAYBOOK_REQUEST_TIMEOUT_MS: Type.Integer({ minimum: 1000, maximum: 3_600_000, default: 30_000 }),
  PLAYBOOK_KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ minimum: 1000, maximum: 3_600_000, default: 72_000 }),
  PLAYBOOK_MAX_CONTENT_BYTES: Type.Integer({
    minimum: 1,
    maximum: MAX_CONTENT_BYTES_CEILING,
    default: 16 * 1024 * 1024,
  }),
  PLAYBOOK_MAX_PUBLISH_BYTES: Type.Integer({
    minimum: 1024,
    maximum: MAX_CONTENT_BYTES_CEILING,
    default: 32 * 1024 * 1024,
  }),
  PLAYBOOK_MAX_PUBLISH_RESOURCES: Type.Integer({
    minimum: 1,
    maximum: MAX_CATALOG_RESOURCES,
    default: MAX_CATALOG_RESOURCES,
  }),
  // 32 MiB: each MiB of a full budget is about a MiB of resident memory, and under a mixed load at a
  // million Resources an instance with 64 MiB of answers peaked at 275 MB, past the 250 MB that D30
  // bounds a serving instance to (`npm run bench:scale`).
  PLAYBOOK_ANSWER_CACHE_BYTES: Type.Integer({
    minimum: 0,
    maximum: 2 ** 40,
    default: 32 * 1024 * 1024,
  }),
  PLAYBOOK_SYNC_RETENTION_S: Type.Integer({ minimum: 60, maximum: 315_360_000, default: 2_592_000 }),
  PLAYBOOK_SYNC_MAX_WAITERS: Type.Integer({ minimum: 0, maximum: 100_000, default: 1000 }),
  PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY: Type.Integer({ minimum: 1, maximum: 100_000, default: 20 }),
  PLAYBOOK_DEPLOYMENT_KEY: Type.Optional(
    Type.String({ minLength: 1, description: 'comma-separated base64 keys of at least 32 bytes each' }),
  ),
  PLAYBOOK_WEBHOOK_ALLOW_HTTP: Type.Union([Type.Literal('true'), Type.Literal('false')], {
    default: 'false',
  }),
  PLAYBOOK_WEBHOOK_ALLOW_PRIVATE: Type.Union([Type.Literal('true'), Type.Literal('false')], {
    default: 'false',
  }),
  PLAYBOOK_WEBHOOK_RETRY_SCHEDULE: Type.String({
    default: '5s,5m,30m,2h,5h,10h,10h',
    pattern: '^\\s*\\d{1,7}(ms|s|m|h|d)\\s*(,\\s*\\d{1,7}(ms|s|m|h|d)\\s*){0,19}$',
    description:
      'comma-separated delays before each retry, each a number and a unit (ms, s, m, h, d), at most 20',
  }),
  PLAYBOOK_WEBHOOK_TIMEOUT_MS: Type.Integer({ minimum: 100, maximum: 10_000, default: 10_000 }),
  PLAYBOOK_WEBHOOK_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 100, default: 10 }),
  PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 100, default: 2 }),
  PLAYBOOK_WEBHOOK_DISABLE_AFTER_S: Type.Integer({ minimum: 1, maximum: 31_536_000, default: 432_000 }),
  PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT: Type.Integer({
    minimum: 1,
    maximum: 10_000_000,
    default: 10_000,
  }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info' },
  ),
});
type Env = Static<typeof EnvSchema>;

export type DatabaseConfig =
  | { readonly kind: 'sqlite'; readonly path: string }
  | {
      readonly kind: 'postgres';
      readonly url: string;
      readonly readUrl?: string;
      /**
       * Whether the reads built once are kept prepared on each connection, by name (D30): off behind a
       * pooler that cannot carry them (PgBouncer before 1.21, or without `max_prepared_statements`).
       */
      readonly preparedStatements?: boolean;
    };

export type ContentStoreConfig =
  | { readonly kind: 'directory'; readonly path: string }
  | { readonly kind: 's3'; readonly bucket: string; readonly prefix: string; readonly endpoint?: string };

export interface Config {
  readonly port: number;
  /** D25: where `GET /metrics` listens; absent when `PLAYBOOK_METRICS_PORT` is unset (no listener). */
  readonly metrics?: { readonly port: number; readonly host: string };
  readonly host: string;
  readonly dataDir: string;
  readonly database: DatabaseConfig;
  readonly contentStore: ContentStoreConfig;
  readonly environment: 'test' | 'live';
  readonly redisUrl?: string;
  readonly jwt: {
    readonly jwksUrl?: string;
    readonly issuer?: string;
    readonly audience?: string;
    readonly accountsClaim: string;
    readonly clockToleranceS: number;
    /** D20: the furthest a token's `exp` may be from now (`PLAYBOOK_JWT_MAX_TTL_S`). */
    readonly maxTtlS: number;
  };
  /** D20: active API keys one account may hold (`PLAYBOOK_MAX_KEYS_PER_ACCOUNT`). */
  readonly maxKeysPerAccount: number;
  /** D22: where the public keys that sign leak reports are listed; leak reports are off without it. */
  readonly leakReportKeysUrl?: string;
  readonly rateLimit: { readonly max: number; readonly windowMs: number; readonly authFailureMax: number };
  /** D20: how long a request may take to arrive, and an idle keep-alive connection may stay open. */
  readonly timeouts: { readonly requestMs: number; readonly keepAliveMs: number };
  /** D20: the most bytes of content one Resource Version may have (`PLAYBOOK_MAX_CONTENT_BYTES`). */
  readonly maxContentBytes: number;
  /** D23: the largest body a publishing request may have (`PLAYBOOK_MAX_PUBLISH_BYTES`). */
  readonly maxPublishBytes: number;
  /** D20: the most Resources one publishing request may hold (`PLAYBOOK_MAX_PUBLISH_RESOURCES`); past it, 413. */
  readonly maxPublishResources: number;
  /** Memory for read answers, compressed forms included (`PLAYBOOK_ANSWER_CACHE_BYTES`). */
  readonly answerCacheBytes: number;
  readonly logLevel: string;
  /** Proxies whose `X-Forwarded-For` names the client: none, all, a hop count, or addresses. */
  readonly trustProxy: boolean | number | string[];
  /**
   * D31: how long a stopping instance goes on serving after `/readyz` fails, for a load balancer to
   * stop sending it traffic (`PLAYBOOK_SHUTDOWN_DELAY_MS`).
   */
  readonly shutdownDelayMs: number;
  /**
   * D27: how far back a sync position may be (`PLAYBOOK_SYNC_RETENTION_S`): a position whose next change
   * is older is answered 410, and the follower starts over.
   */
  readonly syncRetentionS: number;
  /** D27: requests one instance holds waiting for a change (`PLAYBOOK_SYNC_MAX_WAITERS`); past it, 503. */
  readonly syncMaxWaiters: number;
  /**
   * D27: requests one credential (a key, or a token's user) holds at once on one instance
   * (`PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY`); past it, 429.
   */
  readonly syncMaxWaitersPerKey: number;
  /**
   * D27/D28: the deployment's keys as written in `PLAYBOOK_DEPLOYMENT_KEY` (the first signs and seals);
   * absent, the data directory's key file on SQLite (foundation/deployment-key.ts).
   */
  readonly deploymentKeys?: readonly string[];
  /** D28: how webhook deliveries are made. */
  readonly webhooks: WebhookConfig;
  /** D33: how people sign in to the console. */
  readonly console: ConsoleConfig;
}

/** D33: how people sign in to the console at `/console`. */
export interface ConsoleConfig {
  /**
   * The identity provider the console signs in with, by OpenID Connect's authorization code flow with
   * PKCE (`PLAYBOOK_OIDC_ISSUER`, `PLAYBOOK_OIDC_CLIENT_ID`); absent, the console has no such sign-in.
   */
  readonly oidc?: { readonly issuer: string; readonly clientId: string };
  /**
   * `PLAYBOOK_DEV_SIGN_IN`: the development sign-in (a `test` deployment's embedded signer) answers
   * clients on every address, not only those on this machine.
   */
  readonly devSignInOpen: boolean;
}

/** D28: how webhook deliveries are made. */
export interface WebhookConfig {
  /** `PLAYBOOK_WEBHOOK_ALLOW_HTTP`: endpoints may be plain http (local development). */
  readonly allowHttp: boolean;
  /** `PLAYBOOK_WEBHOOK_ALLOW_PRIVATE`: endpoints may be on loopback, private or link-local addresses. */
  readonly allowPrivate: boolean;
  /** The delay before each retry after a failed attempt; once they run out the delivery has failed. */
  readonly retryScheduleMs: readonly number[];
  /** The longest one attempt may take, connection included. */
  readonly timeoutMs: number;
  /** Attempts one instance makes at once. */
  readonly concurrency: number;
  /** Attempts one instance makes at once to one endpoint: a slow endpoint holds this many slots, never all. */
  readonly perEndpoint: number;
  /** How long an endpoint's attempts may fail, with no success, before it is disabled. */
  readonly disableAfterMs: number;
  /** Deliveries pending to one endpoint at most: past it the oldest fail with `backlog_exceeded`. */
  readonly maxPendingPerEndpoint: number;
}

/** A configuration value that stops the process; the message names the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** A URL's user and password never reach an error message, which ends up in logs (D18). */
function withoutCredentials(value: string): string {
  return value.replace(/\/\/[^@/]*@/, '//***@');
}

function readVariable(name: string, schema: TSchema, raw: string | undefined): unknown {
  const text = raw === undefined || raw.trim() === '' ? undefined : raw.trim();
  if (text === undefined) return Value.Default(schema, undefined);
  // Conversion alone would truncate "80.5" to 80: integers must be written as plain digits.
  const value = schema.type === 'integer' && !/^-?[0-9]+$/.test(text) ? text : Value.Convert(schema, text);
  if (!Value.Check(schema, value)) {
    const expected = schema.description ?? describe(schema);
    throw new ConfigError(
      `${name}=${JSON.stringify(withoutCredentials(text))} is not valid: expected ${expected}`,
    );
  }
  return value;
}

function describe(schema: TSchema): string {
  if (schema.type === 'integer') return `an integer from ${schema.minimum} to ${schema.maximum}`;
  if (Array.isArray(schema.anyOf)) return `one of ${schema.anyOf.map((s: TSchema) => s.const).join(', ')}`;
  if (schema.pattern) return `a value matching ${schema.pattern}`;
  return 'a non-empty value';
}

function parseDatabase(env: Env, dataDir: string): DatabaseConfig {
  const url = env.PLAYBOOK_DATABASE_URL;
  if (url === undefined) return { kind: 'sqlite', path: path.join(dataDir, 'playbook.sqlite') };
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length);
    if (file === '')
      throw new ConfigError('PLAYBOOK_DATABASE_URL=sqlite: needs a file path, e.g. sqlite:./data/db');
    return { kind: 'sqlite', path: file === ':memory:' ? file : path.resolve(file) };
  }
  const preparedStatements = env.PLAYBOOK_DATABASE_PREPARED_STATEMENTS !== 'false';
  return env.PLAYBOOK_DATABASE_READ_URL === undefined
    ? { kind: 'postgres', url, preparedStatements }
    : { kind: 'postgres', url, readUrl: env.PLAYBOOK_DATABASE_READ_URL, preparedStatements };
}

function parseContentStore(env: Env, dataDir: string): ContentStoreConfig {
  const location = env.PLAYBOOK_CONTENT_STORE;
  if (location === undefined) return { kind: 'directory', path: path.join(dataDir, 'content') };
  if (location.startsWith('s3://')) {
    const match = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(location);
    if (!match)
      throw new ConfigError(
        `PLAYBOOK_CONTENT_STORE=${withoutCredentials(location)} is not valid: expected s3://bucket/prefix`,
      );
    const prefix = (match[2] ?? '').replace(/^\/+|\/+$/g, '');
    const endpoint = env.PLAYBOOK_S3_ENDPOINT;
    return endpoint === undefined
      ? { kind: 's3', bucket: match[1]!, prefix }
      : { kind: 's3', bucket: match[1]!, prefix, endpoint };
  }
  // D31: anything that starts like a URL (a scheme, a colon and a slash) is one, and only two kinds are
  // known: `s3:/bucket` or `https://…` is a mistake to name, not a directory to create.
  const fileUrl = /^file:\/\//i;
  if (/^[a-z][a-z0-9+.-]+:\//i.test(location) && !fileUrl.test(location)) {
    throw new ConfigError(
      `PLAYBOOK_CONTENT_STORE=${withoutCredentials(location)} is not valid: expected a directory, file:///path or s3://bucket/prefix`,
    );
  }
  return { kind: 'directory', path: path.resolve(location.replace(fileUrl, '')) };
}

/**
 * Validates the environment once and returns a frozen configuration.
 *
 * @example
 * const config = loadConfig(process.env);
 * config.database.kind; // 'sqlite' unless PLAYBOOK_DATABASE_URL says postgres://…
 */
export function loadConfig(source: Readonly<Record<string, string | undefined>>): Config {
  const values: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(EnvSchema.properties)) {
    values[name] = readVariable(name, schema, source[name]);
  }
  const env = values as Env;
  // Unset, it is the project's own `data/`, wherever the command runs from: `npx playbook token` in
  // another folder must use the server's signing key and database, not make fresh ones there.
  const dataDir =
    env.PLAYBOOK_DATA_DIR === undefined
      ? path.join(PROJECT_ROOT, 'data')
      : path.resolve(env.PLAYBOOK_DATA_DIR);
  const jwt = {
    accountsClaim: env.PLAYBOOK_JWT_ACCOUNTS_CLAIM,
    clockToleranceS: env.PLAYBOOK_JWT_CLOCK_TOLERANCE_S,
    maxTtlS: env.PLAYBOOK_JWT_MAX_TTL_S,
    ...(env.PLAYBOOK_JWKS_URL === undefined ? {} : { jwksUrl: env.PLAYBOOK_JWKS_URL }),
    ...(env.PLAYBOOK_JWT_ISSUER === undefined ? {} : { issuer: env.PLAYBOOK_JWT_ISSUER }),
    ...(env.PLAYBOOK_JWT_AUDIENCE === undefined ? {} : { audience: env.PLAYBOOK_JWT_AUDIENCE }),
  };
  const config: Config = {
    port: env.PORT,
    ...(env.PLAYBOOK_METRICS_PORT === undefined
      ? {}
      : { metrics: { port: env.PLAYBOOK_METRICS_PORT, host: env.PLAYBOOK_METRICS_HOST } }),
    host: env.HOST,
    dataDir,
    database: parseDatabase(env, dataDir),
    contentStore: parseContentStore(env, dataDir),
    environment: env.PLAYBOOK_ENVIRONMENT,
    ...(env.PLAYBOOK_REDIS_URL === undefined ? {} : { redisUrl: env.PLAYBOOK_REDIS_URL }),
    jwt,
    rateLimit: {
      max: env.PLAYBOOK_RATE_LIMIT_MAX,
      windowMs: env.PLAYBOOK_RATE_LIMIT_WINDOW_MS,
      authFailureMax: env.PLAYBOOK_AUTH_FAILURE_MAX,
    },
    timeouts: { requestMs: env.PLAYBOOK_REQUEST_TIMEOUT_MS, keepAliveMs: env.PLAYBOOK_KEEP_ALIVE_TIMEOUT_MS },
    maxContentBytes: env.PLAYBOOK_MAX_CONTENT_BYTES,
    maxPublishBytes: env.PLAYBOOK_MAX_PUBLISH_BYTES,
    maxPublishResources: env.PLAYBOOK_MAX_PUBLISH_RESOURCES,
    maxKeysPerAccount: env.PLAYBOOK_MAX_KEYS_PER_ACCOUNT,
    ...(env.PLAYBOOK_LEAK_REPORT_KEYS_URL === undefined
      ? {}
      : { leakReportKeysUrl: env.PLAYBOOK_LEAK_REPORT_KEYS_URL }),
    answerCacheBytes: env.PLAYBOOK_ANSWER_CACHE_BYTES,
    logLevel: env.LOG_LEVEL,
    trustProxy: parseTrustProxy(env.PLAYBOOK_TRUST_PROXY),
    shutdownDelayMs: env.PLAYBOOK_SHUTDOWN_DELAY_MS,
    syncRetentionS: env.PLAYBOOK_SYNC_RETENTION_S,
    syncMaxWaiters: env.PLAYBOOK_SYNC_MAX_WAITERS,
    syncMaxWaitersPerKey: env.PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY,
    ...(env.PLAYBOOK_DEPLOYMENT_KEY === undefined
      ? {}
      : { deploymentKeys: parseDeploymentKeys(env.PLAYBOOK_DEPLOYMENT_KEY) }),
    console: parseConsole(env),
    webhooks: {
      allowHttp: env.PLAYBOOK_WEBHOOK_ALLOW_HTTP === 'true',
      allowPrivate: env.PLAYBOOK_WEBHOOK_ALLOW_PRIVATE === 'true',
      retryScheduleMs: parseDurations(env.PLAYBOOK_WEBHOOK_RETRY_SCHEDULE),
      timeoutMs: env.PLAYBOOK_WEBHOOK_TIMEOUT_MS,
      concurrency: env.PLAYBOOK_WEBHOOK_CONCURRENCY,
      perEndpoint: env.PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY,
      disableAfterMs: env.PLAYBOOK_WEBHOOK_DISABLE_AFTER_S * 1000,
      maxPendingPerEndpoint: env.PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT,
    },
  };
  checkLiveTokens(config);
  return deepFreeze(config);
}

/**
 * The environment a deployment runs in (`PLAYBOOK_ENVIRONMENT`), read alone: what a command that
 * refuses to run in `live` asks before anything else of the configuration is checked.
 */
export function deploymentEnvironment(
  source: Readonly<Record<string, string | undefined>>,
): Config['environment'] {
  const name = 'PLAYBOOK_ENVIRONMENT';
  return readVariable(name, EnvSchema.properties[name], source[name]) as Config['environment'];
}

/**
 * D9: a `live` deployment verifies access tokens with its identity provider's keys and never signs its
 * own, so the keys' address is required and fetched over https (a key set that can be altered on the
 * way lets anyone sign), and every token must name the issuer and audience this deployment trusts.
 * Checked when the configuration is loaded, and again wherever a signer could be made.
 */
export function checkLiveTokens(config: {
  readonly environment: Config['environment'];
  readonly jwt: Pick<Config['jwt'], 'jwksUrl' | 'issuer' | 'audience'>;
}): void {
  if (config.environment !== 'live') return;
  const { jwksUrl, issuer, audience } = config.jwt;
  if (jwksUrl === undefined || issuer === undefined || audience === undefined) {
    const missing = [
      ...(jwksUrl === undefined ? ['PLAYBOOK_JWKS_URL'] : []),
      ...(issuer === undefined ? ['PLAYBOOK_JWT_ISSUER'] : []),
      ...(audience === undefined ? ['PLAYBOOK_JWT_AUDIENCE'] : []),
    ];
    throw new ConfigError(
      `${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} required with PLAYBOOK_ENVIRONMENT=live: a live deployment verifies access tokens with its identity provider's keys and never signs its own`,
    );
  }
  if (!jwksUrl.startsWith('https://')) {
    throw new ConfigError(
      `PLAYBOOK_JWKS_URL=${JSON.stringify(withoutCredentials(jwksUrl))} is not valid with PLAYBOOK_ENVIRONMENT=live: expected an https:// URL, so that the keys that sign access tokens cannot be altered on the way`,
    );
  }
}

/**
 * D33: the console's sign-in. An identity provider is named by both its issuer and the console's
 * client id, or by neither; its issuer is `https:` (plain `http:` to a loopback host by its text
 * alone, as D14 judges hosts, for a provider on the same machine). The development sign-in exists only
 * beside the embedded signer, so opening it where there is none (a `live` deployment, or tokens from
 * `PLAYBOOK_JWKS_URL`) is a mistake to name.
 */
function parseConsole(env: Env): ConsoleConfig {
  const issuer = env.PLAYBOOK_OIDC_ISSUER;
  const clientId = env.PLAYBOOK_OIDC_CLIENT_ID;
  if ((issuer === undefined) !== (clientId === undefined)) {
    const missing = issuer === undefined ? 'PLAYBOOK_OIDC_ISSUER' : 'PLAYBOOK_OIDC_CLIENT_ID';
    const given = issuer === undefined ? 'PLAYBOOK_OIDC_CLIENT_ID' : 'PLAYBOOK_OIDC_ISSUER';
    throw new ConfigError(`${missing} is required with ${given}: the console signs in with both or neither`);
  }
  if (
    issuer !== undefined &&
    !issuer.startsWith('https://') &&
    !(issuer.startsWith('http://') && isLoopbackUrl(issuer))
  ) {
    throw new ConfigError(
      `PLAYBOOK_OIDC_ISSUER=${JSON.stringify(withoutCredentials(issuer))} is not valid: expected an https:// URL (plain http:// only to localhost or a loopback address), so that sign-ins cannot be read or altered on the way`,
    );
  }
  const devSignInOpen = env.PLAYBOOK_DEV_SIGN_IN === 'true';
  if (devSignInOpen && (env.PLAYBOOK_ENVIRONMENT === 'live' || env.PLAYBOOK_JWKS_URL !== undefined)) {
    throw new ConfigError(
      'PLAYBOOK_DEV_SIGN_IN=true is not valid here: the development sign-in exists only in a test deployment that signs its own tokens (no PLAYBOOK_JWKS_URL, PLAYBOOK_ENVIRONMENT=test)',
    );
  }
  return {
    ...(issuer !== undefined && clientId !== undefined ? { oidc: { issuer, clientId } } : {}),
    devSignInOpen,
  };
}

const DURATION_UNITS_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** `5s,5m,2h` as milliseconds; the schema has checked the form. */
function parseDurations(value: string): number[] {
  return value.split(',').map((entry) => {
    const [, amount, unit] = /^\s*(\d+)(ms|s|m|h|d)\s*$/.exec(entry)!;
    return Number(amount) * DURATION_UNITS_MS[unit!]!;
  });
}

/** Bytes of a deployment key; a configured key may be longer, never shorter. */
export const DEPLOYMENT_KEY_BYTES = 32;

/** The bytes of one deployment key written as base64 or base64url. */
export function decodeDeploymentKey(text: string): Buffer {
  return Buffer.from(text, /[-_]/.test(text) ? 'base64url' : 'base64');
}

/** What is wrong with one deployment key as written (base64 or base64url), if anything; never quotes it. */
export function deploymentKeyProblem(text: string): string | undefined {
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) return 'is not base64';
  const bytes = decodeDeploymentKey(text).length;
  return bytes < DEPLOYMENT_KEY_BYTES
    ? `holds ${bytes} bytes, at least ${DEPLOYMENT_KEY_BYTES} are needed (make one with: openssl rand -base64 32)`
    : undefined;
}

/** The keys of `PLAYBOOK_DEPLOYMENT_KEY`, each checked; a message names the variable, never a key. */
function parseDeploymentKeys(value: string): string[] {
  return value.split(',').map((entry, index) => {
    const key = entry.trim();
    const problem = deploymentKeyProblem(key);
    if (problem) throw new ConfigError(`PLAYBOOK_DEPLOYMENT_KEY is not valid: key ${index + 1} ${problem}`);
    return key;
  });
}

/** Ranges of addresses that the proxy-address matcher knows by name. */
const NAMED_RANGES = new Set(['loopback', 'linklocal', 'uniquelocal']);

/**
 * D31: every proxy address or range is checked here, naming the variable, rather than taken on trust
 * and refused later by the server as it starts (`10.0.0.0/33` once stopped `serve` with a stack trace).
 */
function parseTrustProxy(value: string): boolean | number | string[] {
  if (value === 'false') return false;
  if (value === 'true') return true;
  if (/^[0-9]{1,2}$/.test(value)) return Number(value);
  const entries = value.split(',').map((entry) => entry.trim());
  for (const entry of entries) {
    const problem = proxyEntryProblem(entry);
    if (problem) {
      throw new ConfigError(
        `PLAYBOOK_TRUST_PROXY=${JSON.stringify(value)} is not valid: ${JSON.stringify(entry)} ${problem}; expected false, true, a hop count (0-99), or comma-separated addresses, CIDR ranges (10.0.0.0/8, fd00::/8) or loopback, linklocal, uniquelocal`,
      );
    }
  }
  return entries;
}

/** What is wrong with one proxy entry, if anything. */
function proxyEntryProblem(entry: string): string | undefined {
  if (NAMED_RANGES.has(entry)) return undefined;
  const [address = '', prefix, extra] = entry.split('/');
  if (extra !== undefined) return 'has more than one "/"';
  const family = isIP(address);
  if (family === 0) return 'is not an IP address';
  if (prefix === undefined) return undefined;
  // An IPv4 range may give its netmask rather than its length: it must be one, bits set from the left.
  if (family === 4 && isIP(prefix) === 4) {
    const mask = prefix.split('.').reduce((value, octet) => value * 256 + Number(octet), 0);
    const inverted = 2 ** 32 - 1 - mask;
    return (inverted & (inverted + 1)) === 0 ? undefined : 'has a netmask whose bits are not contiguous';
  }
  const bits = family === 4 ? 32 : 128;
  if (!/^[0-9]{1,3}$/.test(prefix) || Number(prefix) > bits) {
    return `has a prefix length that is not 0-${bits}`;
  }
  return undefined;
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
