import {
  createRemoteJWKSet,
  errors,
  type JWSAlgorithm,
  type JWTPayload,
  type JWTVerifyGetKey,
  jwtVerify,
  type RemoteJWKSetOptions,
} from 'jose';
import { AuthenticationError, UnavailableError } from '../foundation/errors.js';
import { SERVICE_OWNER } from '../schemas/identity.js';
import { DEV_ALGORITHM, type DevTokenSigner, type TokenClaimsConfig } from './dev-signer.js';

/**
 * Asymmetric algorithms only. `none` is never accepted by `jwtVerify`, and the HS* family is left
 * out on purpose: with a symmetric algorithm a published verification key would also be a signing key.
 */
export const REMOTE_ALGORITHMS: JWSAlgorithm[] = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
];

/** Compact JWS: three base64url segments. Anything else is refused before any cryptography. */
const COMPACT_JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
const MAX_TOKEN_LENGTH = 16 * 1024;

/** What a verified access token says: who the user is and which accounts they may act for (D9). */
export interface VerifiedToken {
  readonly subject: string;
  readonly accounts: readonly string[];
  /** The token's `exp`, in seconds since the epoch. */
  readonly expiresAt: number;
}

/** Where access tokens' signing keys come from: `PLAYBOOK_JWKS_URL`, or the embedded `playbook token` signer. */
export type TokenKeys = 'jwks' | 'embedded';

export interface AccessTokenVerifierOptions extends TokenClaimsConfig {
  readonly clockToleranceS: number;
  /** D20: a token whose `exp` is further than this from now is refused, however well signed. */
  readonly maxTtlS: number;
  readonly now?: () => number;
}

/**
 * Verifies user access tokens with `jose` (D9): signature by an allowed asymmetric algorithm, `exp`
 * required, `iss` and `aud` when configured, `sub` as the user, and the accounts claim.
 */
export class AccessTokenVerifier {
  private constructor(
    private readonly key: JWTVerifyGetKey,
    private readonly algorithms: JWSAlgorithm[],
    /** Where the keys that sign tokens come from: an identity provider's JWKS, or the embedded signer. */
    readonly keys: TokenKeys,
    private readonly options: AccessTokenVerifierOptions,
  ) {}

  /**
   * Keys from an identity provider's JWKS: fetched on first use, cached, and fetched again when a
   * token names an unknown `kid` (key rotation), at most once per `cooldownDuration`.
   */
  static remote(
    jwksUrl: string,
    options: AccessTokenVerifierOptions,
    jwks: RemoteJWKSetOptions = {},
  ): AccessTokenVerifier {
    return new AccessTokenVerifier(
      createRemoteJWKSet(new URL(jwksUrl), jwks),
      REMOTE_ALGORITHMS,
      'jwks',
      options,
    );
  }

  /** The public half of the embedded dev signer. */
  static embedded(signer: DevTokenSigner, options: AccessTokenVerifierOptions): AccessTokenVerifier {
    return new AccessTokenVerifier(() => signer.verificationKey(), [DEV_ALGORITHM], 'embedded', options);
  }

  /** Returns the user and accounts, or throws `AuthenticationError` (401) without echoing the token. */
  async verify(token: string): Promise<VerifiedToken> {
    if (token.length > MAX_TOKEN_LENGTH || !COMPACT_JWT.test(token)) {
      throw new AuthenticationError('the access token is malformed', 'malformed');
    }
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.key, {
        algorithms: this.algorithms,
        requiredClaims: ['exp', 'sub'],
        clockTolerance: this.options.clockToleranceS,
        ...(this.options.issuer === undefined ? {} : { issuer: this.options.issuer }),
        ...(this.options.audience === undefined ? {} : { audience: this.options.audience }),
        ...(this.options.now ? { currentDate: new Date(this.options.now()) } : {}),
      }));
    } catch (error) {
      throw this.refusal(error);
    }
    // jose has checked that `exp` is a number in the future.
    const expiresAt = payload.exp as number;
    const now = this.nowS();
    if (expiresAt - now > this.options.maxTtlS) {
      throw new AuthenticationError(
        `the access token expires more than ${this.options.maxTtlS} seconds from now; this service accepts none that live longer`,
        'claims',
      );
    }
    const subject = payload.sub;
    if (typeof subject !== 'string' || subject.length === 0 || subject.length > 256) {
      throw new AuthenticationError('the access token has no usable subject', 'claims');
    }
    return { subject, accounts: this.accountsOf(payload), expiresAt };
  }

  /**
   * Throws the refusal a token whose `exp` is `expiresAt` gets now, if it has expired since it was
   * verified (D27: a request held past it), as `verify` judges it: with the clock tolerance.
   */
  checkNotExpired(expiresAt: number): void {
    if (expiresAt <= this.nowS() - this.options.clockToleranceS) {
      throw new AuthenticationError('the access token has expired', 'expired');
    }
  }

  /** Now, in whole seconds since the epoch, as jose reads `exp` against it. */
  private nowS(): number {
    return Math.floor((this.options.now?.() ?? Date.now()) / 1000);
  }

  private accountsOf(payload: JWTPayload): string[] {
    const claim = payload[this.options.accountsClaim];
    if (claim === undefined) return [];
    if (!Array.isArray(claim) || !claim.every((a): a is string => typeof a === 'string' && a.length > 0)) {
      throw new AuthenticationError(
        `the access token's ${this.options.accountsClaim} claim is not a list`,
        'claims',
      );
    }
    // `svc` names the service's own content, never an account a user may act for (D26).
    return [...new Set(claim)].filter((account) => account !== SERVICE_OWNER);
  }

  private refusal(error: unknown): Error {
    if (error instanceof errors.JWTExpired)
      return new AuthenticationError('the access token has expired', 'expired');
    if (this.keys === 'jwks') {
      // The identity provider's key set could not be fetched or read: our outage, not a bad token.
      const generic = error instanceof errors.JOSEError && error.code === 'ERR_JOSE_GENERIC';
      if (
        error instanceof errors.JWKSTimeout ||
        error instanceof errors.JWKSInvalid ||
        generic ||
        !(error instanceof errors.JOSEError)
      ) {
        return new UnavailableError('the access token key set cannot be fetched');
      }
    }
    if (error instanceof errors.JWTClaimValidationFailed) {
      return new AuthenticationError(`the access token's ${error.claim} claim is not accepted`, 'claims');
    }
    if (error instanceof errors.JOSEError)
      return new AuthenticationError('the access token is not valid', 'invalid');
    return error instanceof Error ? error : new Error(String(error));
  }
}
