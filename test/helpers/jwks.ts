import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { type CryptoKey, exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';

/** An identity provider for tests: signing keys, tokens, and its key endpoint as a real HTTP server. */

export const ISSUER = 'https://id.example.test';
export const AUDIENCE = 'playbook';

/**
 * What a `live` deployment must be told of its identity provider (D9): where its keys are (nothing is
 * fetched there until a token is verified), and the issuer and audience its tokens carry.
 */
export function liveEnv(jwksUrl = 'https://id.example.test/.well-known/jwks.json'): Record<string, string> {
  return {
    PLAYBOOK_ENVIRONMENT: 'live',
    PLAYBOOK_JWKS_URL: jwksUrl,
    PLAYBOOK_JWT_ISSUER: ISSUER,
    PLAYBOOK_JWT_AUDIENCE: AUDIENCE,
  };
}

export interface SigningKey {
  readonly kid: string;
  readonly alg: 'RS256' | 'ES256';
  readonly privateKey: CryptoKey;
  readonly publicJwk: JWK;
}

export async function signingKey(kid: string, alg: 'RS256' | 'ES256'): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg);
  return { kid, alg, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}

export function sign(
  key: SigningKey,
  claims: { sub: string; accounts: string[] },
  ttl = '10m',
): Promise<string> {
  return new SignJWT({ accounts: claims.accounts })
    .setProtectedHeader({ alg: key.alg, kid: key.kid })
    .setSubject(claims.sub)
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setIssuedAt()
    .setExpirationTime(ttl)
    .sign(key.privateKey);
}

/**
 * An identity provider's key endpoint: a real HTTP server on 127.0.0.1 that counts its fetches; over
 * https when given a certificate (for 127.0.0.1), as a live deployment requires.
 */
export class JwksServer {
  keys: JWK[] = [];
  fetches = 0;
  /** Serve a document that is JSON but no key set, as a misconfigured provider might. */
  malformed = false;
  /** Fetches still to be answered 500, as a provider in trouble would. */
  failures = 0;
  private readonly server: http.Server;

  constructor(private readonly tls?: { readonly cert: Buffer; readonly key: Buffer }) {
    const listener: http.RequestListener = (request, response) => this.answer(request, response);
    this.server = tls ? https.createServer(tls, listener) : http.createServer(listener);
  }

  private answer(request: http.IncomingMessage, response: http.ServerResponse): void {
    if (request.url !== '/.well-known/jwks.json') {
      response.writeHead(404).end();
      return;
    }
    this.fetches++;
    if (this.failures > 0) {
      this.failures--;
      response.writeHead(500).end();
      return;
    }
    const body = this.malformed ? { keys: 'not a list of keys' } : { keys: this.keys };
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    const scheme = this.tls ? 'https' : 'http';
    return `${scheme}://127.0.0.1:${(this.server.address() as AddressInfo).port}/.well-known/jwks.json`;
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
