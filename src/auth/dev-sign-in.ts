import ipaddr from 'ipaddr.js';
import { ForbiddenError } from '../foundation/errors.js';
import { type DevSignInBody, type DevSignInToken, MAX_DEV_SIGN_IN_TTL_S } from '../schemas/identity.js';
import type { DevTokenSigner } from './dev-signer.js';

export interface DevSignInOptions {
  /** `PLAYBOOK_DEV_SIGN_IN=true`: clients on other machines may sign in too. */
  readonly openToEveryone: boolean;
  /** D20: the longest a token may live (`PLAYBOOK_JWT_MAX_TTL_S`). */
  readonly maxTtlS: number;
  /** Milliseconds since the epoch. */
  readonly now?: () => number;
}

/**
 * Whether `address` (a socket's, or the client's after `PLAYBOOK_TRUST_PROXY`) is on this machine:
 * 127.0.0.0/8 and `::1`, IPv4-mapped IPv6 addresses judged as the IPv4 they carry. An address that
 * does not parse is not.
 */
export function isLoopbackAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  return ipaddr.process(address).range() === 'loopback';
}

/**
 * D33's development sign-in: a short-lived user access token from the embedded signer (D9), as
 * `playbook token` mints one, for the console's "Sign in for development" form. It exists only where
 * the embedded signer does (a `test` deployment without an identity provider); it takes no credential,
 * so it answers clients on this machine only unless the deployment opens it to every client.
 */
export class DevSignIn {
  constructor(
    private readonly signer: DevTokenSigner,
    private readonly options: DevSignInOptions,
  ) {}

  /** Signs `input.user` in for `input.accounts`, when the client at `clientAddress` may sign in. */
  async signIn(input: DevSignInBody, clientAddress: string): Promise<DevSignInToken> {
    if (!this.options.openToEveryone && !isLoopbackAddress(clientAddress)) {
      throw new ForbiddenError(
        'the development sign-in answers clients on the machine the service runs on only',
      );
    }
    const ttlSeconds = Math.min(input.ttlSeconds ?? MAX_DEV_SIGN_IN_TTL_S, this.options.maxTtlS);
    const issuedAt = Math.floor((this.options.now?.() ?? Date.now()) / 1000);
    const accessToken = await this.signer.mint({
      subject: input.user,
      accounts: input.accounts,
      ttlSeconds,
      issuedAt,
    });
    return {
      accessToken,
      tokenType: 'Bearer',
      expiresAt: new Date((issuedAt + ttlSeconds) * 1000).toISOString(),
    };
  }
}
