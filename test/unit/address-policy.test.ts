import { describe, expect, it } from 'vitest';
import { type AddressClass, classifyAddress, isPublicAddress } from '../../src/webhooks/address-policy.js';

/**
 * D28: a webhook connects to public addresses only. Every form in which a loopback, private,
 * link-local, metadata or otherwise internal address can be written is recognised as what it is.
 */
describe('address classification for webhook connections (D28)', () => {
  const cases: [string, AddressClass][] = [
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['::1', 'loopback'],
    ['[::1]', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['[::ffff:127.0.0.1]', 'loopback'],
    ['64:ff9b::7f00:1', 'loopback'],
    ['2002:7f00:1::1', 'loopback'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['::', 'unspecified'],
    ['[::]', 'unspecified'],
    ['10.0.0.1', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:192.168.0.1', 'private'],
    ['100.64.0.1', 'carrier-grade-nat'],
    ['100.127.255.255', 'carrier-grade-nat'],
    ['100.100.100.200', 'carrier-grade-nat'],
    ['169.254.169.254', 'link-local'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:a9fe:a9fe', 'link-local'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['fd00::1', 'unique-local'],
    ['fd00:ec2::254', 'unique-local'],
    ['fc00::1', 'unique-local'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['ff02::1', 'multicast'],
    ['255.255.255.255', 'reserved'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.10', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['2001:db8::1', 'reserved'],
    ['2001::1', 'reserved'],
    ['fec0::1', 'reserved'],
    ['::7f00:1', 'reserved'],
    // IPv4-translated (RFC 6052's SIIT form, ::ffff:0:0:0/96): reserved, whatever it embeds.
    ['::ffff:0:7f00:1', 'reserved'],
    ['[::ffff:0:7f00:1]', 'reserved'],
    ['::ffff:0:127.0.0.1', 'reserved'],
    ['::ffff:0:a00:1', 'reserved'],
    ['::ffff:0:a9fe:a9fe', 'reserved'],
    ['::ffff:0:808:808', 'reserved'],
    ['0:0:0:0:ffff:0:7f00:1', 'reserved'],
    // Other IPv6 outside global unicast, and special-purpose space within it.
    ['::1:0:0:1', 'reserved'],
    ['4000::1', 'reserved'],
    ['64:ff9b:1::7f00:1', 'reserved'],
    ['100::1', 'reserved'],
    ['3fff::1', 'reserved'],
    ['5f00::1', 'reserved'],
    ['2001:2::1', 'reserved'],
    // Embedded addresses of every kind are judged as what they embed.
    ['::ffff:100.64.0.1', 'carrier-grade-nat'],
    ['64:ff9b::a9fe:a9fe', 'link-local'],
    ['64:ff9b::10.0.0.1', 'private'],
    ['2002:a00:1::1', 'private'],
    ['2002:a9fe:a9fe::1', 'link-local'],
    // Metadata services of the clouds: AWS (IPv4, IPv6 and ECS), Alibaba, Oracle.
    ['169.254.170.2', 'link-local'],
    ['fd00:ec2::254', 'unique-local'],
    ['100.100.100.200', 'carrier-grade-nat'],
    ['192.0.0.192', 'reserved'],
    // IPv4 in another form than four decimal parts is never handed over by a URL or a resolver: what
    // is not an address in its standard form is never connected to.
    ['2130706433', 'reserved'],
    ['0x7f000001', 'reserved'],
    ['0x7f.0.0.1', 'reserved'],
    ['0177.0.0.1', 'reserved'],
    ['127.1', 'reserved'],
    ['017700000001', 'reserved'],
    ['not-an-address', 'reserved'],
    ['localhost', 'reserved'],
    ['8.8.8.8', 'public'],
    ['93.184.216.34', 'public'],
    ['172.32.0.1', 'public'],
    ['100.128.0.1', 'public'],
    ['::ffff:8.8.8.8', 'public'],
    ['64:ff9b::808:808', 'public'],
    ['2606:4700:4700::1111', 'public'],
    ['[2a00:1450:4001:80b::200e]', 'public'],
  ];

  it.each(cases)('%s is %s', (address, expected) => {
    expect(classifyAddress(address)).toBe(expected);
    expect(isPublicAddress(address)).toBe(expected === 'public');
  });
});
