import { BlockList, isIP } from 'node:net';

/**
 * Which addresses a webhook may connect to (D28): public unicast ones only. Everything else a server
 * reaches that the internet does not is refused, so that an endpoint URL cannot make the service call
 * into its own network (server-side request forgery): loopback, private, carrier-grade NAT,
 * link-local (the cloud metadata service at 169.254.169.254 among them), unique-local, multicast,
 * unspecified, documentation, benchmarking and reserved ranges (IANA's special-purpose registries).
 * IPv6 addresses that embed an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
 * `2002::/16`) are judged by the address they embed.
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

type Range = readonly [address: string, prefix: number];

const RANGES: readonly (readonly [Exclude<AddressClass, 'public'>, 'ipv4' | 'ipv6', readonly Range[]])[] = [
  ['unspecified', 'ipv4', [['0.0.0.0', 8]]],
  ['loopback', 'ipv4', [['127.0.0.0', 8]]],
  [
    'private',
    'ipv4',
    [
      ['10.0.0.0', 8],
      ['172.16.0.0', 12],
      ['192.168.0.0', 16],
    ],
  ],
  ['carrier-grade-nat', 'ipv4', [['100.64.0.0', 10]]],
  ['link-local', 'ipv4', [['169.254.0.0', 16]]],
  ['multicast', 'ipv4', [['224.0.0.0', 4]]],
  [
    'reserved',
    'ipv4',
    [
      ['192.0.0.0', 24], // IETF protocol assignments
      ['192.0.2.0', 24], // documentation
      ['192.88.99.0', 24], // 6to4 relay anycast
      ['198.18.0.0', 15], // benchmarking
      ['198.51.100.0', 24], // documentation
      ['203.0.113.0', 24], // documentation
      ['240.0.0.0', 4], // reserved, and the broadcast address
    ],
  ],
  ['unspecified', 'ipv6', [['::', 128]]],
  ['loopback', 'ipv6', [['::1', 128]]],
  ['link-local', 'ipv6', [['fe80::', 10]]],
  ['unique-local', 'ipv6', [['fc00::', 7]]],
  ['multicast', 'ipv6', [['ff00::', 8]]],
  [
    'reserved',
    'ipv6',
    [
      ['::', 96], // IPv4-compatible (deprecated)
      ['64:ff9b:1::', 48], // local-use NAT64
      ['100::', 64], // discard-only
      ['2001::', 23], // IETF protocol assignments (Teredo among them)
      ['2001:db8::', 32], // documentation
      ['3fff::', 20], // documentation
      ['5f00::', 16], // segment routing
      ['fec0::', 10], // site-local (deprecated)
    ],
  ],
];

const LISTS = RANGES.map(([kind, family, ranges]) => {
  const list = new BlockList();
  for (const [address, prefix] of ranges) list.addSubnet(address, prefix, family);
  return [kind, family, list] as const;
});

/** The eight 16-bit groups of an IPv6 address. */
function groupsOf(address: string): number[] {
  let text = address;
  // A dotted IPv4 tail (`::ffff:127.0.0.1`) is two groups.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1]!.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const parse = (part: string) =>
    part === '' ? [] : part.split(':').map((group) => Number.parseInt(group, 16));
  const left = parse(head);
  const right = tail === undefined ? [] : parse(tail);
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

function ipv4Of(high: number, low: number): string {
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
}

/** The IPv4 address an IPv6 one stands for, when it embeds one. */
function embeddedIpv4(address: string): string | undefined {
  const g = groupsOf(address);
  // ::ffff:a.b.c.d (IPv4-mapped)
  if (g.slice(0, 5).every((group) => group === 0) && g[5] === 0xffff) return ipv4Of(g[6]!, g[7]!);
  // 64:ff9b::a.b.c.d (NAT64, well-known prefix)
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((group) => group === 0)) {
    return ipv4Of(g[6]!, g[7]!);
  }
  // 2002:aabb:ccdd::/48 (6to4)
  if (g[0] === 0x2002) return ipv4Of(g[1]!, g[2]!);
  return undefined;
}

/**
 * What kind of address `address` is: an IP literal, IPv6 with or without brackets or a zone. Anything
 * that is not an IP address at all is `reserved`: never connected to.
 *
 * @example
 * classifyAddress('169.254.169.254'); // 'link-local'
 * classifyAddress('::ffff:127.0.0.1'); // 'loopback'
 * classifyAddress('93.184.216.34'); // 'public'
 */
export function classifyAddress(address: string): AddressClass {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const family = isIP(bare);
  if (family === 0) return 'reserved';
  if (family === 6) {
    const embedded = embeddedIpv4(bare);
    if (embedded !== undefined) return classifyAddress(embedded);
  }
  const type = family === 4 ? 'ipv4' : 'ipv6';
  for (const [kind, listFamily, list] of LISTS) {
    if (listFamily === type && list.check(bare, type)) return kind;
  }
  return 'public';
}

/** Whether a webhook may connect to `address`. */
export function isPublicAddress(address: string): boolean {
  return classifyAddress(address) === 'public';
}
