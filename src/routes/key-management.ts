import type { FastifyRequest } from 'fastify';
import type { KeyManager } from '../auth/api-key-service.js';

/** The security scheme of key management, for the OpenAPI document. */
export const security: { [scheme: string]: string[] }[] = [{ accessToken: [] }];

/** Key management takes a user access token only (contract §4.5): an API key here is a 401. */
export const KEY_MANAGEMENT = { auth: { policy: 'access-token' } } as const;

/** The user behind the access token the auth hook admitted. */
export function managerOf(request: FastifyRequest): KeyManager {
  const credential = request.principal?.credential;
  // The auth hook admits only access tokens here; anything else is a wiring bug.
  if (credential?.kind !== 'access-token') throw new Error('key management reached without an access token');
  return { subject: credential.subject, accounts: credential.accounts, requestId: request.id };
}
