import { isIP } from 'node:net';
import { InputError } from '../foundation/errors.js';
import { isPublicAddress } from './address-policy.js';

/** Where endpoints may be, as the deployment allows (`PLAYBOOK_WEBHOOK_ALLOW_HTTP`, `…_ALLOW_PRIVATE`). */
export interface EndpointUrlRules {
  readonly allowHttp: boolean;
  readonly allowPrivate: boolean;
}

/**
 * Names given to the machine itself (RFC 6761): refused when registered, as the addresses they stand
 * for would be refused at each connection anyway.
 */
function isLocalName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

/**
 * An endpoint URL as given, checked (400 naming `field`) and returned in its normal form. What can be
 * told from the URL alone is refused here: another scheme than https (http where allowed), a user or a
 * password (they would be sent with every delivery and shown in every list), a fragment (never sent),
 * a host that is an address or a name of the machine itself or its networks. A name is judged again
 * at each connection, by the address it then resolves to (see webhook-request.ts).
 */
export function checkEndpointUrl(text: string, rules: EndpointUrlRules, field = 'url'): string {
  const refuse = (message: string) => InputError.of('body', field, message);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw refuse('must be an absolute URL, such as https://example.com/hooks/playbook');
  }
  const schemes = rules.allowHttp ? ['https:', 'http:'] : ['https:'];
  if (!schemes.includes(url.protocol)) {
    throw refuse(rules.allowHttp ? 'must be an https or http URL' : 'must be an https URL');
  }
  if (url.username !== '' || url.password !== '') {
    throw refuse('must not hold a user name or password: authenticate deliveries by their signature');
  }
  if (url.hash !== '') throw refuse('must not hold a fragment (#…): it is never sent');
  if (url.hostname === '') throw refuse('must name a host');
  if (!rules.allowPrivate) {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if ((isIP(host) !== 0 && !isPublicAddress(host)) || isLocalName(host)) {
      throw refuse('must name a public host: loopback, private and link-local addresses are refused');
    }
  }
  return url.href;
}
