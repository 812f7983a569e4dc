import { generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Leak reports as a secret scanning partner program sends them (D22): its signing keys, the list of
 * their public halves served over HTTP as the real one is, and reports signed by one of them.
 *
 * @example
 * const keyList = new KeyList();
 * const identity = createTestIdentity(backend, { env: { PLAYBOOK_LEAK_REPORT_KEYS_URL: await keyList.start() } });
 * const signer = newSigner('a1b2');
 * keyList.listed = [signer];
 * const body = report(key.key);
 * await app.inject({ method: 'POST', url: LEAKS, headers: signed(body, signer), payload: body });
 */

/** Where leak reports are posted. */
export const LEAKS = '/v3/identity/api-keys/leaks';

export interface Signer {
  readonly identifier: string;
  readonly privateKey: KeyObject;
  readonly publicPem: string;
}

/** A signing key of the partner program, under `identifier`. */
export function newSigner(identifier: string, curve = 'prime256v1'): Signer {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: curve });
  return { identifier, privateKey, publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

/** The partner program's key list, served over HTTP as the real one is; counts its fetches. */
export class KeyList {
  listed: Signer[] = [];
  fetches = 0;
  down = false;
  private server = http.createServer((_request, response) => {
    this.fetches++;
    if (this.down) {
      response.writeHead(502).end();
      return;
    }
    const public_keys = this.listed.map((signer, i) => ({
      key_identifier: signer.identifier,
      key: signer.publicPem,
      is_current: i === this.listed.length - 1,
    }));
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ public_keys }));
  });

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/meta/public_keys/secret_scanning`;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** The headers of a report `body` signed by `signer`. */
export function signed(body: string, signer: Signer): Record<string, string> {
  return {
    'content-type': 'application/json',
    'github-public-key-identifier': signer.identifier,
    'github-public-key-signature': sign('sha256', Buffer.from(body), signer.privateKey).toString('base64'),
  };
}

/** A report of `tokens`, each found in the same public file. */
export const report = (...tokens: string[]) =>
  JSON.stringify(
    tokens.map((token) => ({
      token,
      type: 'playbook_api_key',
      url: 'https://github.com/octo/app/blob/0123abc/config.env',
      source: 'content',
    })),
  );
