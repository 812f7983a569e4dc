import type { IncomingMessage } from 'node:http';
import proxyAddr from '@fastify/proxy-addr';

/** The address a request came from, as the service believes it (D31). */
export type ClientAddress = (request: IncomingMessage) => string | undefined;

/** Which proxies' `X-Forwarded-For` to believe (`PLAYBOOK_TRUST_PROXY`): none, all, a hop count, or addresses. */
export type TrustProxy = boolean | number | string[];

/**
 * The trust of `PLAYBOOK_TRUST_PROXY` as Fastify's `trustProxy` option takes it: a hop count trusts
 * that many proxies nearest the service; addresses and booleans pass as they are.
 */
export function trustProxyOption(
  setting: TrustProxy,
): boolean | string[] | ((address: string, hop: number) => boolean) {
  return typeof setting === 'number' ? (_address: string, hop: number) => hop < setting : setting;
}

/**
 * The client address of a request as Fastify's `request.ip` gives it under the same trust, for what
 * answers a request before Fastify sees it (the fast path's access line): the socket's peer, or with
 * proxies trusted, the address `X-Forwarded-For` names past them.
 */
export function clientAddressOf(setting: TrustProxy): ClientAddress {
  const option = trustProxyOption(setting);
  if (option === false) return (request) => request.socket.remoteAddress;
  const trusted =
    option === true ? () => true : typeof option === 'function' ? option : proxyAddr.compile(option);
  return (request) => proxyAddr.all(request, trusted).at(-1);
}
