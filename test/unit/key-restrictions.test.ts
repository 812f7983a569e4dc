import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { describe, expect, it } from 'vitest';
import {
  addressAllowed,
  canonicalAddress,
  compileRestrictions,
  mergeRestrictions,
} from '../../src/auth/key-restrictions.js';
import { InputError } from '../../src/foundation/errors.js';

const DEPLOYMENT = { max: 1200, windowMs: 60_000 };

function addressesOf(...allowedIps: string[]) {
  return compileRestrictions({ catalogs: null, allowedIps, rateLimit: null })!.allowedIps!;
}

/** D32: restrictions written canonically, and the client addresses they admit, by ipaddr.js's rules. */
describe('key restrictions', () => {
  it('writes addresses and ranges as ipaddr.js does, ranges at their network address', () => {
    expect(canonicalAddress('192.0.2.7')).toBe('192.0.2.7');
    expect(canonicalAddress('192.0.2.7/32')).toBe('192.0.2.7');
    expect(canonicalAddress('10.9.8.7/8')).toBe('10.0.0.0/8');
    expect(canonicalAddress('0.0.0.0/0')).toBe('0.0.0.0/0');
    expect(canonicalAddress('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
    expect(canonicalAddress('2001:db8::1/32')).toBe('2001:db8::/32');
    expect(canonicalAddress('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(canonicalAddress('::ffff:10.0.0.0/104')).toBe('10.0.0.0/8');
    // Below /96 a range holds more than the mapped addresses: it stays IPv6.
    expect(canonicalAddress('::ffff:0:0/95')).toBe('::fffe:0:0/95');
  });

  it('refuses what is not an address people write', () => {
    for (const entry of [
      '10.1',
      '010.0.0.1',
      '0x0a.0.0.1',
      '167772161',
      'fe80::1%eth0',
      '10.0.0.0/08',
      '',
      '/8',
      'a.b.c.d',
    ]) {
      expect(canonicalAddress(entry), entry).toBeUndefined();
    }
  });

  it('an IPv4-mapped IPv6 client address matches IPv4 entries; IPv6 entries match IPv6 clients', () => {
    const check = addressesOf('10.0.0.0/8', '2001:db8::/32', '192.0.2.7');
    expect(check.allows('10.200.0.1')).toBe(true);
    expect(check.allows('::ffff:10.200.0.1')).toBe(true);
    expect(check.allows('::ffff:192.0.2.7')).toBe(true);
    expect(check.allows('192.0.2.8')).toBe(false);
    expect(check.allows('11.0.0.1')).toBe(false);
    expect(check.allows('2001:db8:1::9')).toBe(true);
    expect(check.allows('2001:db9::1')).toBe(false);
    expect(check.allows('not an address')).toBe(false);
  });

  it('admits exactly what ipaddr.js says a range holds, however often an address asks', () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.ipV4(), fc.integer({ min: 0, max: 32 }), (client, network, bits) => {
        const entry = canonicalAddress(`${network}/${bits}`)!;
        const expected = ipaddr.IPv4.parse(client).match(ipaddr.IPv4.parseCIDR(`${network}/${bits}`));
        const check = addressesOf(entry);
        expect(check.allows(client)).toBe(expected);
        expect(check.allows(`::ffff:${client}`)).toBe(expected);
        expect(check.allows(client)).toBe(expected);
      }),
    );
    fc.assert(
      fc.property(fc.ipV6(), fc.ipV6(), fc.integer({ min: 0, max: 128 }), (client, network, bits) => {
        const parsed = ipaddr.IPv6.parse(client);
        fc.pre(!parsed.isIPv4MappedAddress());
        const entry = canonicalAddress(`${network}/${bits}`)!;
        fc.pre(entry.includes(':'));
        expect(addressesOf(entry).allows(client)).toBe(
          parsed.match(ipaddr.IPv6.parseCIDR(`${network}/${bits}`)),
        );
      }),
    );
  });

  it('a patch changes only what it gives, and checks only that', () => {
    const current = {
      catalogs: ['org/a'],
      allowedIps: ['10.0.0.0/8'],
      rateLimit: { limit: 5000, windowSeconds: 60 },
    };
    // The rate above is past this deployment's, set when its limit was higher: a patch that leaves it is taken.
    expect(mergeRestrictions(current, { allowedIps: null }, DEPLOYMENT)).toEqual({
      catalogs: ['org/a'],
      allowedIps: null,
      rateLimit: { limit: 5000, windowSeconds: 60 },
    });
    expect(() => mergeRestrictions(current, { rateLimit: current.rateLimit }, DEPLOYMENT)).toThrow(
      InputError,
    );
    expect(mergeRestrictions(current, undefined, DEPLOYMENT)).toBe(current);
    expect(mergeRestrictions(current, null, DEPLOYMENT)).toBeNull();
    expect(
      mergeRestrictions(current, { catalogs: null, allowedIps: null, rateLimit: null }, DEPLOYMENT),
    ).toBeNull();
  });

  it('the digest names the canonical set: equal sets alike, any difference apart', () => {
    const of = (catalogs: string[]) =>
      compileRestrictions(mergeRestrictions(null, { catalogs }, DEPLOYMENT))!.digest;
    expect(of(['org/b', 'org/a'])).toBe(of(['org/a', 'org/b', 'org/a']));
    expect(of(['org/*', 'org/a'])).toBe(of(['org/*']));
    expect(of(['org/a'])).not.toBe(of(['svc/a']));
  });

  it('addressAllowed: every address for a key without restrictions or without allowedIps, else its ranges', () => {
    expect(addressAllowed(null, '198.51.100.1')).toBe(true);
    expect(addressAllowed(undefined, 'not an address')).toBe(true);
    const catalogsOnly = compileRestrictions({ catalogs: ['org/a'], allowedIps: null, rateLimit: null });
    expect(addressAllowed(catalogsOnly, '198.51.100.1')).toBe(true);
    const ranged = compileRestrictions({ catalogs: null, allowedIps: ['10.0.0.0/8'], rateLimit: null });
    expect(addressAllowed(ranged, '10.1.2.3')).toBe(true);
    expect(addressAllowed(ranged, '::ffff:10.1.2.3')).toBe(true);
    expect(addressAllowed(ranged, '11.1.2.3')).toBe(false);
    expect(addressAllowed(ranged, 'garbage')).toBe(false);
  });
});
