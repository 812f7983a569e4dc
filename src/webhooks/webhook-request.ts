import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { WebhookFailureReason } from '../schemas/webhooks.js';
import { isPublicAddress } from './address-policy.js';

/**
 * One attempt to POST an event to an endpoint (D28), with Node's own HTTP client, guarded against
 * server-side request forgery where the connection is made rather than only where the URL is
 * registered:
 * - a name is resolved by a lookup that keeps only public addresses and hands the connection the one
 *   it checked, so a name that resolves (or is made to resolve, DNS rebinding) to a private address
 *   gets no connection at all; an address written in the URL is checked before connecting;
 * - the socket's peer address is checked once connected, before a byte of the request is written;
 * - redirects are not followed (a 3xx is a failure), the whole attempt has one deadline, and at most
 *   64 KiB of the answer is read before the connection is dropped.
 */

/** Why an attempt that was made failed, in one word of a fixed set: listed, and a metric's label. */
export type AttemptFailure = Exclude<WebhookFailureReason, 'backlog_exceeded'>;

export interface AttemptResult {
  readonly ok: boolean;
  readonly statusCode?: number;
  readonly durationMs: number;
  /** What went wrong, in words fit for the account's delivery list: never an address the host resolved to. */
  readonly error?: string;
  readonly failure?: AttemptFailure;
}

export interface WebhookRequestOptions {
  readonly timeoutMs: number;
  readonly allowHttp: boolean;
  readonly allowPrivate: boolean;
  /** Name resolution; `dns.lookup` by default (tests give names their own answers). */
  readonly resolve?: typeof dns.lookup;
  /** Connections kept alive between attempts, per scheme. */
  readonly agents?: { readonly http: http.Agent; readonly https: https.Agent };
}

/** The most bytes of an endpoint's answer read. */
export const MAX_ANSWER_BYTES = 64 * 1024;

const NO_PUBLIC_ADDRESS =
  'the host has no public address: loopback, private and link-local addresses are refused';

class RefusedAddressError extends Error {
  override name = 'RefusedAddressError';
  readonly code = 'ERR_WEBHOOK_ADDRESS';
}

class AttemptTimeoutError extends Error {
  override name = 'AttemptTimeoutError';
  readonly code = 'ERR_WEBHOOK_TIMEOUT';
}

/**
 * A `lookup` for `net.connect` that resolves a name as usual and keeps only the addresses `allowed`
 * accepts: a name with none is refused, and the connection goes to an address this function checked,
 * never to one resolved again later.
 */
export function guardedLookup(
  allowed: (address: string) => boolean,
  resolve: typeof dns.lookup = dns.lookup,
): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) {
        callback(error, '', 0);
        return;
      }
      const kept = (addresses as dns.LookupAddress[]).filter((entry) => allowed(entry.address));
      const [first] = kept;
      if (first === undefined) {
        // The same words as for a name that does not resolve: whether an internal name exists is not told.
        callback(new RefusedAddressError(NO_PUBLIC_ADDRESS), '', 0);
        return;
      }
      if (options.all) (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, kept);
      else callback(null, first.address, first.family);
    });
  };
}

/** An attempt's failure in the words the delivery list shows. */
function describeFailure(error: unknown): { error: string; failure: AttemptFailure } {
  const code = (error as { code?: unknown } | null)?.code;
  if (error instanceof AttemptTimeoutError) return { error: error.message, failure: 'timeout' };
  if (error instanceof RefusedAddressError || code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return { error: NO_PUBLIC_ADDRESS, failure: 'address' };
  }
  const words: Record<string, string> = {
    ECONNREFUSED: 'connection refused',
    ECONNRESET: 'connection reset by the endpoint',
    EPIPE: 'connection closed by the endpoint',
    EHOSTUNREACH: 'host unreachable',
    ENETUNREACH: 'network unreachable',
    ETIMEDOUT: 'connection timed out',
    ERR_TLS_CERT_ALTNAME_INVALID: 'TLS: the certificate does not name the host',
    CERT_HAS_EXPIRED: 'TLS: the certificate has expired',
    DEPTH_ZERO_SELF_SIGNED_CERT: 'TLS: the certificate is self-signed',
    SELF_SIGNED_CERT_IN_CHAIN: 'TLS: a certificate of the chain is self-signed',
    UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'TLS: the certificate chain cannot be verified',
    HPE_INVALID_CONSTANT: 'the answer is not HTTP',
  };
  const known = typeof code === 'string' ? words[code] : undefined;
  return {
    error: known ?? (typeof code === 'string' ? `connection failed (${code})` : 'connection failed'),
    failure: 'network',
  };
}

/**
 * POSTs `body` to `url` with `headers`, once. Resolves with the outcome; never rejects. A connection
 * kept alive from an earlier attempt that the endpoint closed meanwhile is tried once more on a new one.
 */
export async function postWebhook(
  url: string,
  headers: Readonly<Record<string, string>>,
  body: string,
  options: WebhookRequestOptions,
): Promise<AttemptResult> {
  const started = performance.now();
  const deadline = started + options.timeoutMs;
  const done = (result: Omit<AttemptResult, 'durationMs'>): AttemptResult => ({
    ...result,
    durationMs: Math.round(performance.now() - started),
  });
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    return done({ ok: false, error: 'the URL is not valid', failure: 'address' });
  }
  if (target.protocol !== 'https:' && !(target.protocol === 'http:' && options.allowHttp)) {
    return done({
      ok: false,
      error: `${target.protocol.slice(0, -1)} is not allowed: https only`,
      failure: 'address',
    });
  }
  const host = target.hostname.replace(/^\[|\]$/g, '');
  // An address written in the URL is connected to without a lookup: it is checked here, before.
  if (!options.allowPrivate && isIP(host) !== 0 && !isPublicAddress(host)) {
    return done({ ok: false, error: NO_PUBLIC_ADDRESS, failure: 'address' });
  }
  for (let attempt = 1; ; attempt++) {
    try {
      const { statusCode } = await send(target, headers, body, options, deadline);
      if (statusCode >= 200 && statusCode < 300) return done({ ok: true, statusCode });
      if (statusCode >= 300 && statusCode < 400) {
        return done({
          ok: false,
          statusCode,
          error: `redirect (${statusCode}) not followed`,
          failure: 'redirect',
        });
      }
      return done({ ok: false, statusCode, error: `answered ${statusCode}`, failure: 'status' });
    } catch (error) {
      const stale = (error as { reusedSocket?: boolean }).reusedSocket === true;
      if (stale && attempt === 1 && performance.now() < deadline) continue;
      return done({ ok: false, ...describeFailure(error) });
    }
  }
}

function send(
  target: URL,
  headers: Readonly<Record<string, string>>,
  body: string,
  options: WebhookRequestOptions,
  deadline: number,
): Promise<{ statusCode: number }> {
  const secure = target.protocol === 'https:';
  const client = secure ? https : http;
  const agent = options.agents ? (secure ? options.agents.https : options.agents.http) : false;
  const allowed = (address: string) => options.allowPrivate || isPublicAddress(address);
  return new Promise((resolve, reject) => {
    let settled = false;
    const request = client.request(target, {
      method: 'POST',
      agent,
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      lookup: guardedLookup(allowed, options.resolve),
    });
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (request.reusedSocket && (error as { code?: string }).code === 'ECONNRESET') {
        Object.assign(error, { reusedSocket: true });
      }
      request.destroy();
      reject(error);
    };
    const timer = setTimeout(
      () => fail(new AttemptTimeoutError(`no answer within ${Math.round(options.timeoutMs / 1000)} s`)),
      Math.max(0, deadline - performance.now()),
    );
    request.on('error', fail);
    // Nothing is written until the peer's address is known to be allowed: headers and body go together.
    const check = (socket: Socket) => {
      const peer = socket.remoteAddress;
      if (peer === undefined || !allowed(peer)) fail(new RefusedAddressError(NO_PUBLIC_ADDRESS));
      else request.end(body);
    };
    request.on('socket', (socket: Socket) => {
      if (socket.connecting) socket.once('connect', () => check(socket));
      else check(socket);
    });
    request.on('response', (answer) => {
      const statusCode = answer.statusCode ?? 0;
      let read = 0;
      answer.on('data', (chunk: Buffer) => {
        read += chunk.length;
        // Enough has been read to know the outcome; the rest is not waited for.
        if (read > MAX_ANSWER_BYTES && !settled) {
          settled = true;
          clearTimeout(timer);
          answer.destroy();
          request.destroy();
          resolve({ statusCode });
        }
      });
      answer.on('end', () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve({ statusCode });
      });
      answer.on('error', fail);
    });
  });
}
