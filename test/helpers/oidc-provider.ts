import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';

/** The console's client id at the test's identity provider. */
export const CONSOLE_CLIENT_ID = 'playbook-console';
/** The audience of the provider's access tokens: what the service is configured to expect. */
export const CONSOLE_AUDIENCE = 'urn:playbook:console-test';

export interface IdentityProvider {
  /** The issuer, `http://127.0.0.1:<port>`. */
  readonly issuer: string;
  /** The configuration a service verifying this provider's tokens, and signing in with it, runs with. */
  readonly serviceEnv: Record<string, string>;
  /** Access tokens issued so far. */
  readonly issued: () => number;
  close(): Promise<void>;
}

export interface IdentityProviderOptions {
  /** The console's origin, `http://127.0.0.1:<port>`: its callback is the one redirect URI. */
  readonly consoleOrigin: string;
  /** The accounts each user's access tokens let them act for. */
  readonly accounts: (user: string) => readonly string[];
  /** How long an access token lives, in seconds; an hour by default. */
  readonly accessTokenTtlS?: number;
}

/** Whether `origin` is an http origin of a loopback address, whatever its port. */
function loopbackOrigin(origin: string): boolean {
  return /^http:\/\/127\.0\.0\.1(:\d+)?$/.test(origin);
}

/**
 * A real OpenID provider for the console's tests (D33): panva's `oidc-provider` on a free port of
 * 127.0.0.1, with its development login and consent pages (any login, any password). The console is a
 * public web client that signs in with the authorization code flow and PKCE, its callback on the
 * service's port, chosen before either starts; a web client may sign in without a prompt (a native
 * one may not), as a reload does. Access tokens are ES256 JWTs for one audience, with the
 * user's accounts in the `accounts` claim, as the service verifies them through the provider's JWKS.
 */
export async function startIdentityProvider(options: IdentityProviderOptions): Promise<IdentityProvider> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  let issued = 0;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CONSOLE_CLIENT_ID,
        application_type: 'web',
        token_endpoint_auth_method: 'none',
        id_token_signed_response_alg: 'ES256',
        redirect_uris: [`${options.consoleOrigin}/console/callback`],
        grant_types: ['authorization_code'],
        response_types: ['code'],
      },
    ],
    jwks: { keys: [{ ...(await exportJWK(privateKey)), kid: 'console-test', alg: 'ES256', use: 'sig' }] },
    cookies: { keys: ['console-test-cookie-key'] },
    pkce: { required: () => true },
    clientBasedCORS: (_ctx, origin) => loopbackOrigin(origin),
    findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
    features: {
      resourceIndicators: {
        enabled: true,
        defaultResource: () => CONSOLE_AUDIENCE,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: 'openid',
          audience: CONSOLE_AUDIENCE,
          accessTokenFormat: 'jwt',
          accessTokenTTL: options.accessTokenTtlS ?? 3600,
          jwt: { sign: { alg: 'ES256' } },
        }),
      },
    },
    extraTokenClaims: (_ctx, token) => {
      if (token.kind !== 'AccessToken') return undefined;
      issued++;
      return { accounts: [...options.accounts(token.accountId)] };
    },
  });
  server.on('request', provider.callback());
  return {
    issuer,
    serviceEnv: {
      PLAYBOOK_OIDC_ISSUER: issuer,
      PLAYBOOK_OIDC_CLIENT_ID: CONSOLE_CLIENT_ID,
      PLAYBOOK_JWKS_URL: `${issuer}/jwks`,
      PLAYBOOK_JWT_ISSUER: issuer,
      PLAYBOOK_JWT_AUDIENCE: CONSOLE_AUDIENCE,
    },
    issued: () => issued,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
