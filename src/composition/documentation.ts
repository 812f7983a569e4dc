import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import fastifyPlugin from 'fastify-plugin';
import { openapiOptions, type SecuritySetup } from '../http/openapi.js';
import { Problem } from '../schemas/common.js';
import { playbookSchemas } from '../schemas/playbook.js';
import { syncSchemas } from '../schemas/sync.js';
import { webhookSchemas } from '../schemas/webhooks.js';

function withoutUpgradeInsecureRequests(policy: string): string {
  return policy
    .split(';')
    .map((directive) => directive.trim())
    .filter((directive) => directive !== '' && directive !== 'upgrade-insecure-requests')
    .join('; ');
}

/**
 * What describes the API (D17), on the root context so that it sees every route registered after it:
 * the shared schemas, the OpenAPI document at `/v3/openapi.json`, the pages at `/docs`, and `/`. Its
 * security schemes are those this deployment takes.
 */
async function describe(
  app: FastifyInstance,
  security: SecuritySetup & { readonly webhooks?: boolean },
): Promise<void> {
  app.addSchema(Problem);
  for (const schema of playbookSchemas) app.addSchema(schema);
  for (const schema of syncSchemas) app.addSchema(schema);
  // An app without webhook endpoints describes none, nor the events they would receive.
  if (security.webhooks) for (const schema of webhookSchemas) app.addSchema(schema);

  await app.register(swagger, openapiOptions(security));
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    // The service is often opened over plain HTTP (a VM, a container): a policy that upgrades its own
    // assets to https would leave the page blank there. TLS is the load balancer's to enforce.
    transformStaticCSP: (header) => withoutUpgradeInsecureRequests(String(header)),
    // "Try it out" calls the service the page came from: the document's server is relative (SERVER),
    // so the page resolves it against its own address, and nothing of the request is written back.
  });

  // Someone who opens the service in a browser finds where to go, rather than a bare 404.
  app.get('/', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return {
      name: 'Playbook API',
      documentation: '/docs',
      guides: '/docs/guides',
      problems: '/docs/problems',
      openapi: '/v3/openapi.json',
      health: '/healthz',
      readiness: '/readyz',
    };
  });

  app.get('/v3/openapi.json', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return app.swagger();
  });
}

export const documentation = fastifyPlugin(describe, { name: 'documentation' });
