import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Which addresses a webhook may connect to (D28): public unicast ones only. Everything else a server
 * reaches that the internet does not is refused, so that an endpoint URL cannot make the service call
 * into its own network (server-side request forgery): loopback, private, carrier-grade NAT,
 * link-local (the cloud metadata service at 169.254.169.254 among them), unique-local, multicast,
 * unspecified, documentation, benchmarking and reserved ranges (IANA's special-purpose registries).
 * IPv6 addresses that embed an IPv4 one for the internet to reach (IPv4-mapped `::ffff:a.b.c.d`,
 * NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the address they embed; IPv4-translated ones
 * (`::ffff:0:a.b.c.d`, RFC 6052's SIIT form) and everything outside global unicast (`2000::/3`) are
 * reserved, whatever they embed.
 *
 * The ranges are ipaddr.js's (the library proxy-addr and Fastify trust); this module only says what
 * each of its range names means for a webhook, and a name it does not know is refused.
 */
export type AddressClass =
  | 'public'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'carrier-grade-nat'
  | 'link-local'
  | 'unique-local'
  | 'multicast'
  | 'reserved';

/** IPv4 range names of ipaddr.js, and what each is here; `unicast` is every other address. */
const IPV4_CLASSES: Readonly<Record<string, AddressClass>> = {
  unicast: 'public',
  unspecified: 'unspecified',
  broadcast: 'reserved',
  multicast: 'multicast',
  linkLocal: 'link-local',
  loopback: 'loopback',
  carrierGradeNat: 'carrier-grade-nat',
  private: 'private',
  reserved: 'reserved',
  // Anycast services of the public internet (AS112 DNS sinks, AMT relays).
  as112: 'public',
  amt: 'public',
};

/** IPv6 range names of ipaddr.js that are an address class of their own; those that embed IPv4 aside. */
const IPV6_CLASSES: Readonly<Record<string, AddressClass>> = {
  unspecified: 'unspecified',
  loopback: 'loopback',
  linkLocal: 'link-local',
  uniqueLocal: 'unique-local',
  multicast: 'multicast',
};

/** Global unicast (`2000::/3`): the only IPv6 space the internet routes to a host of its own. */
const GLOBAL_UNICAST = ipaddr.parseCIDR('2000::/3');
const NAT64_WELL_KNOWN = ipaddr.parseCIDR('64:ff9b::/96');

/** The IPv4 address an IPv6 one stands for on the internet, when it embeds one. */
function embeddedIpv4(address: ipaddr.IPv6, range: string): ipaddr.IPv4 | undefined {
  const [, b = 0, c = 0, , , , g = 0, h = 0] = address.parts;
  const ipv4Of = (high: number, low: number) =>
    new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
  if (range === 'ipv4Mapped') return address.toIPv4Address();
  if (range === 'rfc6052' && address.match(NAT64_WELL_KNOWN)) return ipv4Of(g, h);
  if (range === '6to4') return ipv4Of(b, c);
  return undefined;
}

function classifyIpv6(address: ipaddr.IPv6): AddressClass {
  const range = address.range();
  const embedded = embeddedIpv4(address, range);
  if (embedded !== undefined) return IPV4_CLASSES[embedded.range()] ?? 'reserved';
  const known = IPV6_CLASSES[range];
  if (known !== undefined) return known;
  // Every other named range (documentation, Teredo, benchmarking, ORCHID, discard, site-local, the
  // IPv4-translated and local-use NAT64 forms…) is special-purpose; unnamed space outside 2000::/3 is
  // not allocated to anyone.
  return range === 'unicast' && address.match(GLOBAL_UNICAST) ? 'public' : 'reserved';
}

/**
 * What kind of address `address` is: an IP literal in its standard form, IPv6 with or without
 * brackets or a zone. Anything else (a name, or IPv4 written in octal, hex or as one number, which
 * URLs and resolvers never hand over) is `reserved`: never connected to.
 *
 * @example
 * classifyAddress('169.254.169.254'); // 'link-local'
 * classifyAddress('::ffff:127.0.0.1'); // 'loopback'
 * classifyAddress('::ffff:0:7f00:1'); // 'reserved' (IPv4-translated)
 * classifyAddress('93.184.216.34'); // 'public'
 */
export function classifyAddress(address: string): AddressClass {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const family = isIP(bare);
  if (family === 4) return IPV4_CLASSES[ipaddr.IPv4.parse(bare).range()] ?? 'reserved';
  if (family === 6) return classifyIpv6(ipaddr.IPv6.parse(bare));
  return 'reserved';
}

/** Whether a webhook may connect to `address`. */
export function isPublicAddress(address: string): boolean {
  return classifyAddress(address) === 'public';
}
