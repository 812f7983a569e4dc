import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import { type Authenticator, authHook } from './auth/authenticator.js';
import type { AccessLimiter } from './auth/rate-limits.js';
import type { PlaybookService } from './catalog/playbook-service.js';
import { NotFoundError, UnavailableError } from './errors.js';
import { installAccessLog } from './http/access-log.js';
import { handleError } from './http/problem.js';
import { normalizeQuery } from './http/query.js';
import { operationsRoutes, type ReadinessCheck } from './routes/operations.js';
import { playbookRoutes } from './routes/playbook.js';
import { Problem } from './schemas/common.js';
import { playbookSchemas } from './schemas/playbook.js';

export interface AppDependencies {
  readonly playbook: PlaybookService;
  readonly authenticator: Authenticator;
  /** Rate limits (D10); without them nothing is counted (tests about other things). */
  readonly rateLimits?: AccessLimiter;
  readonly readiness: readonly ReadinessCheck[];
  /** A pino logger, or Fastify logger options; tests pass `false`. */
  readonly logger?: FastifyServerOptions['logger'] | FastifyBaseLogger;
  /** Extra route plugins composed by the caller (the identity area). */
  readonly plugins?: readonly ((app: FastifyInstance) => Promise<void>)[];
  /** Which proxies' `X-Forwarded-For` to believe for the client address (`PLAYBOOK_TRUST_PROXY`). */
  readonly trustProxy?: boolean | number | string[];
}

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Echo a caller's request id when it is sane; otherwise make one (D2). */
function requestIdOf(request: IncomingMessage): string {
  const sent = request.headers['x-request-id'];
  return typeof sent === 'string' && SANE_REQUEST_ID.test(sent) ? sent : randomUUID();
}

/** A hop count trusts that many proxies nearest the service; addresses and booleans pass as they are. */
function trustProxyOption(setting: boolean | number | string[]): FastifyServerOptions['trustProxy'] {
  return typeof setting === 'number' ? (_address: string, hop: number) => hop < setting : setting;
}

/**
 * Builds the HTTP application from explicit dependencies. Starts nothing: `server.ts` and the tests
 * compose the dependencies and decide whether to listen.
 */
export async function buildApp(deps: AppDependencies): Promise<FastifyInstance> {
  const loggerOption = deps.logger ?? false;
  const isLoggerInstance =
    typeof loggerOption === 'object' && loggerOption !== null && 'child' in loggerOption;
  const app = Fastify({
    ...(isLoggerInstance
      ? { loggerInstance: loggerOption as FastifyBaseLogger }
      : { logger: loggerOption as FastifyServerOptions['logger'] }),
    genReqId: requestIdOf,
    // One access line per request instead of Fastify's two (D25): see http/access-log.ts.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 64 * 1024,
    // Requests that arrive while the server drains are refused by the hook below with a problem
    // document, rather than Fastify's bare 503.
    return503OnClosing: false,
    trustProxy: trustProxyOption(deps.trustProxy ?? false),
    // Path values up to this length reach schema validation, which names the bad one (D4); the
    // router's default of 100 would turn a 121-character slug into a bare 414.
    routerOptions: { maxParamLength: 2048 },
    // Errors the router raises before any hook (a bad URL, a path value past the limit above) are
    // answered by the same problem handler as every other error (D2).
    frameworkErrors: handleError,
    ajv: {
      customOptions: {
        // Unknown parameters and fields are errors to report, not properties to drop silently (D3).
        removeAdditional: false,
        allErrors: true,
        coerceTypes: 'array',
        useDefaults: true,
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.decorateRequest('principal', null);
  installAccessLog(app);
  app.setErrorHandler(handleError);
  app.setNotFoundHandler((request) => {
    throw new NotFoundError(`no operation at ${request.method} ${request.url.split('?')[0]}`);
  });

  let draining = false;
  app.addHook('preClose', async () => {
    draining = true;
  });
  // Hooks that need not wait for anything take a callback: Fastify runs them without a promise.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done(draining ? new UnavailableError('the service is shutting down; retry with backoff') : undefined);
  });
  // While draining, every answer closes its connection: an idle keep-alive socket would otherwise
  // hold the server open until its timeout.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (draining) reply.header('connection', 'close');
    done(null, payload);
  });
  // Rate limits (D10) are counted inside the auth hook, once the credential is known, so that every
  // answer carries their headers.
  app.addHook('onRequest', authHook(deps.authenticator, deps.rateLimits));
  app.addHook('preValidation', normalizeQuery);

  app.addSchema(Problem);
  for (const schema of playbookSchemas) app.addSchema(schema);

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Playbook API',
        version: '3.0.0',
        description:
          'Catalogs of Resources with immutable versioned content, read with scoped secret API keys (x-api-key) or user access tokens.',
      },
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' },
          accessToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        },
      },
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: true });

  app.get('/v3/openapi.json', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return app.swagger();
  });

  await app.register(operationsRoutes(deps.readiness));
  await app.register(playbookRoutes(deps.playbook));
  for (const plugin of deps.plugins ?? []) await app.register(plugin);

  return app;
}
