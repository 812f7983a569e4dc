import type { FastifyBaseLogger } from 'fastify';
import type { RemoteJWKSetOptions } from 'jose';
import { AccountPlans } from '../accounts/account-plans.js';
import type { Trust } from '../changes/memory-trust.js';
import { UnitOfWork } from '../changes/unit-of-work.js';
import type { Db } from '../db/tables.js';
import { type Broadcast, InProcessBroadcast } from '../foundation/broadcast.js';
import type { Config } from '../foundation/config.js';
import { AccessTokenVerifier } from './access-tokens.js';
import { findApiKeyWithPlan } from './api-key-repository.js';
import { ApiKeyService } from './api-key-service.js';
import { type ApiKeyLookup, ApiKeyVerifier } from './api-key-verifier.js';
import { CredentialAuthenticator } from './credential-authenticator.js';
import { DevSignIn } from './dev-sign-in.js';
import { DevTokenSigner } from './dev-signer.js';
import { KeyExpiryNotices } from './key-expiry-notices.js';
import { LeakReportSignatures } from './leak-reports.js';
import { MemoryRateCounter, type RateCounter, RateLimits } from './rate-limits.js';
import { type SecretHasher, sha256Hasher } from './secret-digest.js';
import { UsageRecorder } from './usage-recorder.js';

/** Replaceable parts, for tests and for the multi-instance step (a Redis bus and counter). */
export interface IdentityOptions {
  readonly hasher?: SecretHasher;
  readonly revocations?: Broadcast;
  readonly rateCounter?: RateCounter;
  /** Wraps the storage lookup of the key verifier (tests count storage reads with it). */
  readonly keyLookup?: (lookup: ApiKeyLookup) => ApiKeyLookup;
  /** Milliseconds since the epoch; every expiry, window and timestamp reads this clock. */
  readonly now?: () => number;
  readonly usageFlushIntervalMs?: number;
  /** How often due expiry notices are looked for (a minute). */
  readonly expiryNoticeIntervalMs?: number;
  /** Tuning of the remote JWKS (cooldown before refetching on an unknown `kid`, cache age). */
  readonly jwks?: RemoteJWKSetOptions;
  /** How often an unknown leak-report key identifier may fetch the key list again (60 s). */
  readonly leakKeysRefetchAfterMs?: number;
  /** The unit of work key events go through; one on `db` that announces nothing by default. */
  readonly writes?: UnitOfWork;
  /**
   * Where keys and plans are looked up when a request is authenticated: the primary by default. A
   * connection that sees every commit at once and never waits for a write transaction (SQLite's
   * reader) keeps authentication answering while a large write holds the primary (D20).
   */
  readonly lookups?: Db;
  /** D31: whether keys and plans held in memory may be served through a database outage. */
  readonly trust?: Trust;
}

/** Identity and access (D7-D10) as one unit: what the app, the CLI and the tests compose. */
export interface Identity {
  readonly authenticator: CredentialAuthenticator;
  /** D10, keyed on what the authenticator resolves: handed to `buildApp` beside it. */
  readonly rateLimits: RateLimits;
  readonly keys: ApiKeyService;
  /** D22: present when `PLAYBOOK_LEAK_REPORT_KEYS_URL` lists the keys that sign leak reports. */
  readonly leakSignatures?: LeakReportSignatures;
  readonly verifier: ApiKeyVerifier;
  readonly tokens: AccessTokenVerifier;
  /** The embedded signer; absent when access tokens come from `PLAYBOOK_JWKS_URL`. */
  readonly signer?: DevTokenSigner;
  /** D33: the development sign-in, beside the embedded signer and never without it. */
  readonly devSignIn?: DevSignIn;
  readonly usage: UsageRecorder;
  /** D32: the `api_key.expiring` changes; `serve` starts them once listening. */
  readonly expiryNotices: KeyExpiryNotices;
  /** What `serve` prints on start for a newcomer. */
  gettingStarted(address: string): string[];
  /** Writes pending `lastUsedAt` times and stops timers. */
  close(): Promise<void>;
}

/** Composes identity from the configuration and the primary database (revocations must not lag). */
export function createIdentity(
  config: Config,
  db: Db,
  logger: FastifyBaseLogger,
  options: IdentityOptions = {},
): Identity {
  const now = options.now ?? Date.now;
  const hasher = options.hasher ?? sha256Hasher;
  const revocations = options.revocations ?? new InProcessBroadcast();
  const usage = new UsageRecorder(db, logger, {
    ...(options.usageFlushIntervalMs === undefined ? {} : { intervalMs: options.usageFlushIntervalMs }),
    now,
  });
  const lookups = options.lookups ?? db;
  const storage: ApiKeyLookup = { find: (keyId) => findApiKeyWithPlan(lookups, keyId) };
  const verifier = new ApiKeyVerifier({
    lookup: options.keyLookup ? options.keyLookup(storage) : storage,
    hasher,
    revocations,
    usage,
    environment: config.environment,
    now,
    ...(options.trust ? { trust: options.trust } : {}),
  });
  const claims = {
    accountsClaim: config.jwt.accountsClaim,
    clockToleranceS: config.jwt.clockToleranceS,
    maxTtlS: config.jwt.maxTtlS,
    ...(config.jwt.issuer === undefined ? {} : { issuer: config.jwt.issuer }),
    ...(config.jwt.audience === undefined ? {} : { audience: config.jwt.audience }),
    ...(options.now ? { now } : {}),
  };
  // D9: none in a live deployment, nor wherever tokens come from an identity provider.
  const signer = DevTokenSigner.forDeployment(config);
  const tokens = signer
    ? AccessTokenVerifier.embedded(signer, claims)
    : AccessTokenVerifier.remote(config.jwt.jwksUrl!, claims, options.jwks);
  const devSignIn = signer
    ? new DevSignIn(signer, {
        openToEveryone: config.console.devSignInOpen,
        maxTtlS: config.jwt.maxTtlS,
        ...(options.now ? { now } : {}),
      })
    : undefined;
  const rateLimits = new RateLimits(config.rateLimit, options.rateCounter ?? new MemoryRateCounter(now));
  const authenticator = new CredentialAuthenticator(
    verifier,
    tokens,
    new AccountPlans(lookups, now, undefined, options.trust),
  );
  const writes = options.writes ?? new UnitOfWork(db);
  const expiryNotices = new KeyExpiryNotices(db, writes, {
    now,
    logger,
    ...(options.expiryNoticeIntervalMs === undefined ? {} : { intervalMs: options.expiryNoticeIntervalMs }),
  });
  const keys = new ApiKeyService(db, {
    environment: config.environment,
    maxKeysPerAccount: config.maxKeysPerAccount,
    deploymentRate: config.rateLimit,
    hasher,
    revocations,
    usage,
    writes,
    now,
  });
  const leakSignatures =
    config.leakReportKeysUrl === undefined
      ? undefined
      : new LeakReportSignatures({
          keysUrl: config.leakReportKeysUrl,
          now,
          ...(options.leakKeysRefetchAfterMs === undefined
            ? {}
            : { refetchAfterMs: options.leakKeysRefetchAfterMs }),
        });

  return {
    authenticator,
    rateLimits,
    keys,
    ...(leakSignatures ? { leakSignatures } : {}),
    verifier,
    tokens,
    ...(signer ? { signer, devSignIn } : {}),
    usage,
    expiryNotices,
    gettingStarted: (address) => gettingStarted(config, address),
    close: async () => {
      expiryNotices.stop();
      await usage.close();
      verifier.close();
      await revocations.close();
    },
  };
}

function gettingStarted(config: Config, address: string): string[] {
  if (config.jwt.jwksUrl !== undefined) {
    return [
      `Playbook (${config.environment}) is serving on ${address}; API documentation at ${address}/docs`,
      `Access tokens are verified with ${config.jwt.jwksUrl}; create API keys with POST ${address}/v3/identity/api-keys`,
    ];
  }
  return [
    `Playbook (${config.environment}) is serving on ${address}; API documentation at ${address}/docs`,
    `First steps, in a second terminal in this folder (guides at ${address}/docs/guides):`,
    '  export PLAYBOOK_API_KEY=$(npx playbook keys create --account demo --name "first key" --scope playbook:read)',
    `  curl -s ${address}/v3/playbook/catalogs -H "x-api-key: $PLAYBOOK_API_KEY"`,
  ];
}
