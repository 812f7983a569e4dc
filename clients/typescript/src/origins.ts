import { PlaybookError } from './errors.js';

/** An IPv4 address as the URL parser writes every form of one (`0x7f.1`, `2130706433`): dotted decimal. */
const LOOPBACK_IPV4 = /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

/**
 * Whether a URL's host is loopback by its text alone, never resolved: `localhost`, a name under
 * `.localhost`, an address of 127.0.0.0/8, or `[::1]`. A name is never looked up, because what a
 * resolver answers can be changed by whoever controls it; the URL parser has already written every
 * form of an address (`0x7f.1`, `[0:0::1]`) in its one canonical form. Credentials may cross plain
 * HTTP to these hosts only, as they never leave the machine.
 *
 * @example
 * isLoopbackUrl('http://127.0.0.2:8080'); // true
 * isLoopbackUrl('http://playbook.internal'); // false, whatever it resolves to
 */
export function isLoopbackUrl(url: string | URL): boolean {
  const parsed = typeof url === 'string' ? (URL.canParse(url) ? new URL(url) : undefined) : url;
  if (!parsed) return false;
  const host = parsed.hostname;
  return host === 'localhost' || host.endsWith('.localhost') || LOOPBACK_IPV4.test(host) || host === '[::1]';
}

/** Statuses that send the request on to `Location`. */
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Redirects followed for one request at most; past them, the call fails. */
const MAX_REDIRECTS = 5;

/**
 * Sends one request and follows its redirects itself (`redirect: 'manual'`), because `fetch` would
 * follow them with the credential: `Authorization` is dropped on the way to another origin, but
 * `x-api-key` is not, and neither is dropped on the way from https to plain http. A redirect is
 * followed only within the request's own origin and over https; any other fails the call with a
 * {@link PlaybookError} of code `redirect_refused`, and nothing is sent there. A 303, or a 301 or 302
 * answering a POST, is followed with a GET without a body, as `fetch` does.
 */
export async function fetchWithinOrigin(
  fetcher: typeof fetch,
  url: string,
  init: RequestInit & { readonly method: string; readonly headers: Headers },
): Promise<Response> {
  let current = new URL(url);
  let request = init;
  for (let redirects = 0; ; redirects++) {
    const response = await fetcher(current.toString(), { ...request, redirect: 'manual' });
    const location = REDIRECTS.has(response.status) ? response.headers.get('location') : null;
    if (location === null) return response;
    const target = URL.canParse(location, current.href) ? new URL(location, current) : undefined;
    const refusal = refusalOf(current, target, redirects);
    // What is left of the answer is not read: the connection is free for the next request.
    await response.body?.cancel();
    if (refusal !== undefined || target === undefined) {
      const requestId = response.headers.get('x-request-id');
      throw new PlaybookError({
        status: response.status,
        code: 'redirect_refused',
        title: 'Redirect refused',
        detail: `the service redirected the request ${refusal}; a redirect is followed only within the same https origin, so that the credential goes nowhere else`,
        ...(requestId ? { requestId } : {}),
      });
    }
    if (
      response.status === 303 ||
      (request.method === 'POST' && response.status !== 307 && response.status !== 308)
    ) {
      const headers = new Headers(request.headers);
      headers.delete('content-type');
      const { body: _body, ...rest } = request;
      request = { ...rest, method: 'GET', headers };
    }
    current = target;
  }
}

/** Why a redirect from `from` to `to` is not followed, if it is not. */
function refusalOf(from: URL, to: URL | undefined, redirectsSoFar: number): string | undefined {
  if (to === undefined) return 'to an address that is not a URL';
  if (to.origin !== from.origin) return `to another origin (${to.origin})`;
  if (to.protocol !== 'https:') return 'over plain http';
  if (redirectsSoFar >= MAX_REDIRECTS) return `more than ${MAX_REDIRECTS} times`;
  return undefined;
}
