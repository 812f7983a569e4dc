import path from 'node:path';
import {
  type CryptoKey,
  calculateJwkThumbprint,
  exportJWK,
  generateKeyPair,
  importJWK,
  type JWK,
  SignJWT,
} from 'jose';
import { type Config, checkLiveTokens } from '../foundation/config.js';
import { readOrCreatePrivateFile } from '../foundation/private-files.js';

/** The only algorithm of the embedded signer: asymmetric, so the verifier never holds a signing secret. */
export const DEV_ALGORITHM = 'ES256';
/** The `iss` of embedded tokens when no issuer is configured. */
export const DEV_ISSUER = 'urn:playbook:dev';
export const DEV_KEY_FILE = 'dev-token-signing-key.json';

export interface TokenClaimsConfig {
  readonly issuer?: string;
  readonly audience?: string;
  readonly accountsClaim: string;
}

export interface MintOptions {
  /** The user, as `sub`. */
  readonly subject: string;
  /** The accounts the user may act for, in the accounts claim. */
  readonly accounts: readonly string[];
  readonly ttlSeconds: number;
  /** Seconds since the epoch; the current time by default. */
  readonly issuedAt?: number;
}

interface SigningKeys {
  readonly kid: string;
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
}

function isPrivateEcJwk(value: unknown): value is JWK & { kid: string } {
  const jwk = value as Record<string, unknown> | null;
  return (
    typeof jwk === 'object' &&
    jwk !== null &&
    jwk.kty === 'EC' &&
    jwk.crv === 'P-256' &&
    typeof jwk.d === 'string' &&
    typeof jwk.x === 'string' &&
    typeof jwk.y === 'string' &&
    typeof jwk.kid === 'string'
  );
}

/** A new P-256 key pair as the JWK text of its private half, with its thumbprint as `kid`. */
async function newKeyText(): Promise<string> {
  const { privateKey } = await generateKeyPair(DEV_ALGORITHM, { extractable: true });
  const jwk = await exportJWK(privateKey);
  const kid = await calculateJwkThumbprint({ kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y } as JWK);
  return `${JSON.stringify({ ...jwk, kid, alg: DEV_ALGORITHM, use: 'sig' }, null, 2)}\n`;
}

async function loadKeys(file: string): Promise<SigningKeys> {
  // Made once, atomically: the server and `playbook token` started together sign and verify with one pair.
  const text = await readOrCreatePrivateFile(file, newKeyText);
  let jwk: unknown;
  try {
    jwk = JSON.parse(text);
  } catch {
    jwk = undefined;
  }
  if (!isPrivateEcJwk(jwk)) {
    throw new Error(`${file} is not a P-256 signing key; remove it to have a new one made`);
  }
  const { d: _private, ...publicJwk } = jwk;
  return {
    kid: jwk.kid,
    privateKey: (await importJWK(jwk, DEV_ALGORITHM)) as CryptoKey,
    publicKey: (await importJWK(publicJwk, DEV_ALGORITHM)) as CryptoKey,
  };
}

/** What decides whether a deployment signs its own access tokens, and with what claims. */
export type SignerConfig = Pick<Config, 'environment' | 'dataDir'> & {
  readonly jwt: TokenClaimsConfig & Pick<Config['jwt'], 'jwksUrl' | 'issuer' | 'audience'>;
};

/**
 * The embedded signer of D9, for running without an identity provider: an ES256 key pair made in the
 * data directory on first use. The service verifies with its public half; `playbook token` signs with
 * the private half. Made only through {@link DevTokenSigner.forDeployment}, which a `live` deployment
 * never gets one from.
 */
export class DevTokenSigner {
  readonly file: string;
  private keys: Promise<SigningKeys> | undefined;

  private constructor(
    dataDir: string,
    private readonly claims: TokenClaimsConfig,
  ) {
    this.file = path.join(dataDir, DEV_KEY_FILE);
  }

  /**
   * The deployment's embedded signer: one for a `test` deployment without `PLAYBOOK_JWKS_URL`, none
   * when tokens come from an identity provider. A `live` deployment never has one (D9): its tokens come
   * from its identity provider, and a configuration that says otherwise is refused here as it is when
   * loaded, whoever made it.
   *
   * @example
   * const signer = DevTokenSigner.forDeployment(loadConfig(process.env)); // undefined with PLAYBOOK_JWKS_URL
   */
  static forDeployment(config: SignerConfig): DevTokenSigner | undefined {
    checkLiveTokens(config);
    if (config.environment === 'live' || config.jwt.jwksUrl !== undefined) return undefined;
    return new DevTokenSigner(config.dataDir, config.jwt);
  }

  private signingKeys(): Promise<SigningKeys> {
    this.keys ??= loadKeys(this.file).catch((error: unknown) => {
      // A failed load (unreadable directory…) is retried by the next caller rather than remembered.
      this.keys = undefined;
      throw error;
    });
    return this.keys;
  }

  /** The public key tokens are verified with. */
  async verificationKey(): Promise<CryptoKey> {
    return (await this.signingKeys()).publicKey;
  }

  /**
   * Signs an access token.
   *
   * @example
   * const token = await signer.mint({ subject: 'ada', accounts: ['demo'], ttlSeconds: 3600 });
   */
  async mint(options: MintOptions): Promise<string> {
    const { kid, privateKey } = await this.signingKeys();
    const issuedAt = options.issuedAt ?? Math.floor(Date.now() / 1000);
    const jwt = new SignJWT({ [this.claims.accountsClaim]: [...options.accounts] })
      .setProtectedHeader({ alg: DEV_ALGORITHM, kid, typ: 'JWT' })
      .setSubject(options.subject)
      .setIssuer(this.claims.issuer ?? DEV_ISSUER)
      .setIssuedAt(issuedAt)
      .setExpirationTime(issuedAt + options.ttlSeconds);
    if (this.claims.audience !== undefined) jwt.setAudience(this.claims.audience);
    return jwt.sign(privateKey);
  }
}
