import http from 'node:http';
import AjvCompiler, { type Options as AjvOptions } from '@fastify/ajv-compiler';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import type { AccountDirectory } from '../accounts/accounts.js';
import type { ReadAnswers } from '../answers/read-answers.js';
import type { AuditLog } from '../audit/audit-log.js';
import type { ApiKeyService } from '../auth/api-key-service.js';
import { type Authenticator, authenticationCounts } from '../auth/authenticator.js';
import type { DevSignIn } from '../auth/dev-sign-in.js';
import type { LeakReportSignatures } from '../auth/leak-reports.js';
import type { AccessLimiter } from '../auth/rate-limits.js';
import type { KeyUsage } from '../auth/usage-recorder.js';
import type { ConsoleSite } from '../console/console-site.js';
import { type DocsSite, renderDocs } from '../docs/docs-site.js';
import { AccessLog, CREDENTIAL_SAFE_SERIALIZERS } from '../http/access-log.js';
import { clientAddressOf, trustProxyOption } from '../http/client-address.js';
import { clientErrorHandler } from '../http/connection-close.js';
import { LazyCompilers } from '../http/lazy-compilers.js';
import { handleClientError, handleError } from '../http/problem.js';
import { requestIdOf } from '../http/request-id.js';
import { lazyRequestLogger } from '../http/request-logger.js';
import { isCheckedInSlices } from '../http/sliced-body.js';
import { Metrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { PublishService } from '../publish/publish-service.js';
import { consoleRoutes } from '../routes/console.js';
import { devSignInRoutes } from '../routes/dev-sign-in.js';
import { docsPagesRoutes } from '../routes/docs-pages.js';
import { identityRoutes } from '../routes/identity.js';
import { meRoutes } from '../routes/me.js';
import { MemoryReads } from '../routes/memory-reads.js';
import { type InstanceState, operationsRoutes, type ReadinessCheck } from '../routes/operations.js';
import { playbookRoutes } from '../routes/playbook.js';
import { publishRoutes } from '../routes/publish.js';
import { syncRoutes } from '../routes/sync.js';
import { webhookRoutes } from '../routes/webhooks.js';
import type { HeldRequests } from '../sync/held-requests.js';
import type { SyncFeed } from '../sync/sync-feed.js';
import type { WebhookEndpoints } from '../webhooks/webhook-endpoints.js';
import { documentation } from './documentation.js';
import { requestPipeline } from './request-pipeline.js';

export interface AppDependencies {
  /** The read operations' answers, kept in memory. */
  readonly reads: ReadAnswers;
  readonly authenticator: Authenticator;
  /** Rate limits (D10), always given: a caller that wants none says so with a limiter that counts nothing. */
  readonly rateLimits: AccessLimiter;
  /** D32: where answers of requests made with API keys are counted (their usage); nowhere by default. */
  readonly usage?: KeyUsage;
  /** Key management (D8, D22) at `/v3/identity/api-keys`; an app built without it has no identity routes. */
  readonly keys?: ApiKeyService;
  /** D23: the audit trail, listed at `/v3/identity/audit-events` beside key management. */
  readonly audit?: AuditLog;
  /**
   * D23: publishing, with the largest body a write may have and the most Resources a Catalog's body
   * may hold (D20); an app built without it takes no writes.
   */
  readonly publish?: {
    readonly service: PublishService;
    readonly maxBodyBytes: number;
    readonly maxResources: number;
  };
  /**
   * D27: the sync feed at `/v3/playbook/sync`, and the requests it holds, answered at once when the app
   * closes; an app built without it has no sync route.
   */
  readonly sync?: { readonly feed: SyncFeed; readonly held?: HeldRequests };
  /** D28: webhook endpoints at `/v3/identity/webhook-endpoints`; an app built without them has none. */
  readonly webhooks?: WebhookEndpoints;
  /** D33: the accounts `GET /v3/identity/me` describes; an app built without it has no such route. */
  readonly accounts?: AccountDirectory;
  /**
   * D33: the development sign-in, where the embedded signer exists (a `test` deployment without an
   * identity provider); an app built without it has no such route, as a `live` deployment never does.
   */
  readonly devSignIn?: DevSignIn;
  /** D33: the console at `/console`, as `npm run build` made it; an app built without it serves none. */
  readonly console?: ConsoleSite;
  /** D22: verifies leak reports' signatures; without it, leak reports answer 501. */
  readonly leakSignatures?: LeakReportSignatures;
  readonly readiness: readonly ReadinessCheck[];
  /** D31: where the instance is in its life (`/readyz` fails while it starts or drains); serving by default. */
  readonly instance?: InstanceState;
  /** D31: whether the instance holds answers it can serve while a required dependency is down. */
  readonly servesFromMemory?: () => boolean;
  /** A pino logger, or Fastify logger options; tests pass `false`. */
  readonly logger?: FastifyServerOptions['logger'] | FastifyBaseLogger;
  /** Which proxies' `X-Forwarded-For` to believe for the client address (`PLAYBOOK_TRUST_PROXY`). */
  readonly trustProxy?: boolean | number | string[];
  /** D20: how long a request may take to arrive, and an idle keep-alive connection may stay open. */
  readonly timeouts?: { readonly requestMs: number; readonly keepAliveMs: number };
  /** D25: a span per request, when OpenTelemetry tracing is on. */
  readonly tracing?: Tracing;
  /** D25: the service's metrics, which requests are counted into; metrics of its own by default. */
  readonly metrics?: Metrics;
  /**
   * D29: the pages of `docs/` served under `/docs`, rendered at start by `serve`; without them, this
   * checkout's are rendered when a page is first asked for (most apps built by tests never are).
   */
  readonly docs?: DocsSite;
}

/** D20's defaults, as the configuration has them. */
const DEFAULT_TIMEOUTS = { requestMs: 30_000, keepAliveMs: 72_000 };

/** Whatever logger the app is given writes requests and errors with no credential in them (D21). */
function credentialSafe(
  logger: FastifyServerOptions['logger'] | FastifyBaseLogger,
): { loggerInstance: FastifyBaseLogger } | { logger: FastifyServerOptions['logger'] } {
  if (typeof logger === 'object' && logger !== null && 'child' in logger) {
    return { loggerInstance: logger.child({}, { serializers: CREDENTIAL_SAFE_SERIALIZERS }) };
  }
  if (logger === false || logger === undefined) return { logger: false };
  const options = logger === true ? {} : logger;
  return { logger: { ...options, serializers: { ...options.serializers, ...CREDENTIAL_SAFE_SERIALIZERS } } };
}

const validators = AjvCompiler();
const serializers = SerializerSelector();

/**
 * One Ajv per HTTP part (Fastify's schema controller): query strings, paths and headers arrive as
 * text and are coerced to their schema's types; a JSON body carries its own types, so it is checked
 * as it is, and `"name": 7` is refused rather than made to look right. Each check is compiled when
 * first used (`LazyCompilers`).
 */
function validatorPerPart(lazy: LazyCompilers) {
  return (
    externalSchemas: Parameters<typeof validators>[0],
    options: { customOptions?: AjvOptions } = {},
  ) => {
    const coercing = validators(externalSchemas, options);
    const exact = validators(externalSchemas, {
      ...options,
      customOptions: { ...options.customOptions, coerceTypes: false },
    });
    return (route: { httpPart?: string } & Parameters<typeof coercing>[0]) => {
      // A body with a list of thousands is checked by its route, in slices (D20).
      if (route.httpPart === 'body' && isCheckedInSlices((route as { schema?: unknown }).schema)) {
        return (() => true) as unknown as ReturnType<typeof exact>;
      }
      return lazy.check(() => (route.httpPart === 'body' ? exact(route) : coercing(route)));
    };
  };
}

/** Fastify's serializers (fast-json-stringify), each compiled when first used (`LazyCompilers`). */
function serializerPerStatus(lazy: LazyCompilers) {
  return (...factory: Parameters<typeof serializers>) => {
    const compile = serializers(...factory);
    return (route: Parameters<typeof compile>[0]) => lazy.serializer(() => compile(route));
  };
}

/** Each application's schemas not compiled yet (`compileSchemas`). */
const lazySchemas = new WeakMap<object, LazyCompilers>();

/**
 * Compiles every schema of `app` not compiled yet, and throws what a compilation throws: a test's way
 * to prove each route's schemas compile, which an instance otherwise learns on first use.
 */
export function compileSchemas(app: FastifyInstance): number {
  const lazy = lazySchemas.get(app);
  const count = lazy?.uncompiled ?? 0;
  lazy?.compileAll();
  return count;
}

/**
 * Builds the HTTP application from explicit dependencies. Starts nothing: `server.ts` and the tests
 * compose the dependencies and decide whether to listen.
 */
export async function buildApp(deps: AppDependencies): Promise<FastifyInstance> {
  const loggerOption = deps.logger ?? false;
  const timeouts = deps.timeouts ?? DEFAULT_TIMEOUTS;
  const metrics = deps.metrics ?? new Metrics();
  const accessLog = new AccessLog(metrics);
  const counts = authenticationCounts(metrics);
  let draining = false;
  // Reads answered from memory go no further than the server's own handler (routes/memory-reads.ts);
  // with tracing on, every request goes through the hooks that make its span.
  let memoryReads: MemoryReads | undefined;
  /** Fastify's own handler of a request, which the server calls for every request not answered from memory. */
  let frameworkHandler: http.RequestListener | undefined;
  const serverOptions: http.ServerOptions = {
    // A missing Host is refused below with a problem document, rather than by Node with a bare 400.
    requireHostHeader: false,
    headersTimeout: timeouts.requestMs,
    connectionsCheckingInterval: Math.min(1000, timeouts.requestMs),
  };
  const lazy = new LazyCompilers();
  const app = Fastify({
    serverFactory: (handler) => {
      frameworkHandler = handler;
      const server = http.createServer(serverOptions, (request, response) => {
        if (!memoryReads?.handle(request, response)) handler(request, response);
      });
      // What Fastify sets on a server it makes itself.
      server.keepAliveTimeout = timeouts.keepAliveMs;
      server.requestTimeout = timeouts.requestMs;
      return server;
    },
    ...credentialSafe(loggerOption),
    genReqId: requestIdOf,
    // One access line per request instead of Fastify's two (D25): see http/access-log.ts.
    logController: new LogController({ disableRequestLogging: true }),
    // Without a logger, Fastify hands every request the null logger itself, and nothing is to be saved.
    ...(loggerOption === false ? {} : { childLoggerFactory: lazyRequestLogger }),
    bodyLimit: 64 * 1024,
    // Requests that arrive while the server drains are refused by the hook below with a problem
    // document, rather than Fastify's bare 503.
    return503OnClosing: false,
    trustProxy: trustProxyOption(deps.trustProxy ?? false) as FastifyServerOptions['trustProxy'],
    // Path values up to this length reach schema validation, which names the bad one (D4); the
    // router's default of 100 would turn a 121-character slug into a bare 414.
    routerOptions: { maxParamLength: 2048 },
    // Errors the router raises before any hook (a bad URL, a path value past the limit above) are
    // answered by the same problem handler as every other error (D2), and so are those of Node's HTTP
    // parser, before any request exists (a malformed request line, headers over the limit, D20's 408).
    frameworkErrors: handleError,
    clientErrorHandler: clientErrorHandler(handleClientError, timeouts.requestMs),
    // D20: a request whose headers or body arrive slower than this is answered 408 and closed, and a
    // connection that sends nothing in that time is closed unanswered (http/connection-close.ts); Node
    // checks every second rather than every 30.
    requestTimeout: timeouts.requestMs,
    keepAliveTimeout: timeouts.keepAliveMs,
    ajv: {
      customOptions: {
        // Unknown parameters and fields are errors to report, not properties to drop silently (D3).
        removeAdditional: false,
        allErrors: true,
        coerceTypes: 'array',
        useDefaults: true,
        // Each error carries the schema that holds it: an unknown field's problem lists the known ones.
        verbose: true,
      },
    },
    schemaController: {
      compilersFactory: {
        buildValidator: validatorPerPart(lazy),
        buildSerializer: serializerPerStatus(lazy),
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  lazySchemas.set(app, lazy);

  // Plugins by area, each on the root context: how every request is handled, then what describes
  // the API, then the operations of each area.
  await app.register(requestPipeline, {
    authenticator: deps.authenticator,
    rateLimits: deps.rateLimits,
    ...(deps.usage ? { usage: deps.usage } : {}),
    timeouts,
    accessLog,
    counts,
    onDraining: () => {
      draining = true;
    },
    ...(deps.tracing ? { tracing: deps.tracing } : {}),
  });
  await app.register(documentation, {
    leakReports: deps.leakSignatures !== undefined,
    // Told by the authenticator that verifies the tokens, so that no composition can describe other keys.
    tokenKeys: deps.authenticator.tokenKeys ?? 'embedded',
    webhooks: deps.webhooks !== undefined,
  });
  const docs = deps.docs;
  let rendering: Promise<DocsSite> | undefined;
  await app.register(docsPagesRoutes(docs ? async () => docs : () => (rendering ??= renderDocs())));

  await app.register(
    operationsRoutes({
      checks: deps.readiness,
      ...(deps.instance ? { instance: deps.instance } : {}),
      ...(deps.servesFromMemory ? { servesFromMemory: deps.servesFromMemory } : {}),
    }),
  );
  await app.register(playbookRoutes(deps.reads));
  if (!deps.tracing) {
    memoryReads = new MemoryReads({
      answers: deps.reads,
      authenticator: deps.authenticator,
      limiter: deps.rateLimits,
      accessLog,
      counts,
      clientAddress: clientAddressOf(deps.trustProxy ?? false),
      logger: app.log,
      draining: () => draining,
      ...(deps.usage ? { usage: deps.usage } : {}),
    });
    if (frameworkHandler) memoryReads.handOver = frameworkHandler;
  }
  if (deps.sync) {
    await app.register(syncRoutes(deps.sync.feed));
    const held = deps.sync.held;
    // A held request must not hold the shutdown up: it is answered (empty, same position) at once.
    if (held) app.addHook('preClose', async () => held.drain());
  }
  if (deps.publish) await app.register(publishRoutes(deps.publish));
  if (deps.keys) {
    const options = {
      limiter: deps.rateLimits,
      ...(deps.leakSignatures ? { leakSignatures: deps.leakSignatures } : {}),
      ...(deps.audit ? { audit: deps.audit } : {}),
    };
    await app.register(identityRoutes(deps.keys, options));
  }
  if (deps.webhooks) await app.register(webhookRoutes(deps.webhooks));
  if (deps.accounts) await app.register(meRoutes(deps.accounts));
  if (deps.devSignIn) await app.register(devSignInRoutes(deps.devSignIn, deps.rateLimits));
  if (deps.console) await app.register(consoleRoutes(deps.console));

  return app;
}
