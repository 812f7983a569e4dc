import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { DevSignIn } from '../auth/dev-sign-in.js';
import type { AccessLimiter } from '../auth/rate-limits.js';
import { problemResponses } from '../schemas/common.js';
import { DevSignInBody, DevSignInToken } from '../schemas/identity.js';

/**
 * D33: `POST /v3/identity/dev-sign-in`, the development sign-in of the console's "Sign in for
 * development" form. Registered only where the embedded signer exists (a `test` deployment without an
 * identity provider): a `live` deployment has no such route. It takes no credential, so its requests
 * count against the client's address, as failed credentials do (D10).
 */
export function devSignInRoutes(signIn: DevSignIn, limiter: AccessLimiter): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.post(
      '/v3/identity/dev-sign-in',
      {
        // Counted before the body is read, so that refusals count too.
        onRequest: async (request, reply) => {
          await limiter.consume(request, reply, `dev-sign-in:${request.ip}`);
        },
        schema: {
          operationId: 'devSignIn',
          summary: 'Sign in for development: a short-lived access token from the embedded signer',
          description:
            "Only on a test deployment that signs its own access tokens (no PLAYBOOK_JWKS_URL); a live deployment has no such operation. Mints a user access token for the user and accounts given, as playbook token does, living ttlSeconds (an hour at most). Answers clients on the service's own machine only (by the client address after PLAYBOOK_TRUST_PROXY; 403 for any other) unless PLAYBOOK_DEV_SIGN_IN=true. Each request counts against the client address's rate limit.",
          tags: ['identity'],
          security: [],
          body: DevSignInBody,
          response: {
            200: { ...DevSignInToken, description: 'The access token: keep it in memory, never in storage' },
            ...problemResponses(400, 403, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const token = await signIn.signIn(request.body, request.ip);
        // The answer holds a credential: no cache may keep it.
        reply.header('cache-control', 'no-store');
        return token;
      },
    );
  };
}
