import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { AccountDirectory } from '../accounts/accounts.js';
import { Answer, routeSerializer, sendAnswer } from '../http/answer.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import { MAX_LISTED_ACCOUNTS, Me } from '../schemas/identity.js';
import { NoQuery } from '../schemas/playbook.js';

/** The longest account name `me` shows: a name is a label, and the answer's schema bounds it. */
const MAX_NAME = 200;

function tokenOf(request: FastifyRequest) {
  const credential = request.principal?.credential;
  // The auth hook admits only access tokens here; anything else is a wiring bug.
  if (credential?.kind !== 'access-token') throw new Error('me reached without an access token');
  return credential;
}

/**
 * D33: `GET /v3/identity/me`, who an access token is and the accounts it lets the user act for, with
 * their names and plans: what a user interface needs to say who is signed in and to offer an account
 * switcher. A token only: an API key belongs to one account and is nobody.
 */
export function meRoutes(accounts: AccountDirectory): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.route({
      method: ['GET', 'HEAD'],
      url: '/v3/identity/me',
      config: { auth: { policy: 'access-token' } },
      schema: {
        operationId: 'getMe',
        summary: 'Who the access token is, and the accounts it lets the user act for',
        description:
          "The user (the token's subject), each account the token lists with its name and plan, and when the token expires. An API key is refused (401): it acts for one account and is no user.",
        tags: ['identity'],
        security: [{ accessToken: [] }],
        querystring: NoQuery,
        response: {
          200: { ...Me, description: 'The signed-in user and their accounts' },
          ...notModifiedResponse,
          ...problemResponses(400, 401, 429, 500, 503),
        },
      },
      handler: async (request, reply) => {
        const token = tokenOf(request);
        const listed = await accounts(token.accounts.slice(0, MAX_LISTED_ACCOUNTS));
        const me: Me = {
          user: { id: token.subject },
          accounts: listed.map((account) =>
            account.name === undefined ? account : { ...account, name: account.name.slice(0, MAX_NAME) },
          ),
          tokenExpiresAt: new Date(token.expiresAt * 1000).toISOString(),
        };
        return sendAnswer(request, reply, Answer.json(routeSerializer<Me>(reply)(me)));
      },
    });
  };
}
