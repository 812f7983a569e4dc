import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { generateApiKey, parseApiKey } from '../../src/schemas/api-key-format.js';

describe('API key format (D8)', () => {
  it('mints svc_sk_<env>_<16-char keyId>_<33 random + 6 checksum> keys that parse back', () => {
    for (const environment of ['test', 'live'] as const) {
      const minted = generateApiKey(environment);
      expect(minted.key).toMatch(new RegExp(`^svc_sk_${environment}_[A-Za-z0-9]{16}_[A-Za-z0-9]{39}$`));
      expect(minted.key).toBe(`svc_sk_${environment}_${minted.keyId}_${minted.secret}`);
      expect(parseApiKey(minted.key)).toEqual({
        environment,
        keyId: minted.keyId,
        secret: minted.secret,
      });
    }
  });

  it('draws every character of the secret uniformly from base62', () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 2000; i++) {
      for (const char of generateApiKey('test').secret.slice(0, 33))
        counts.set(char, (counts.get(char) ?? 0) + 1);
    }
    // 66,000 draws over 62 symbols: about 1065 each; a biased generator strays far from that.
    expect(counts.size).toBe(62);
    for (const count of counts.values()) expect(count).toBeGreaterThan(850);
    for (const count of counts.values()) expect(count).toBeLessThan(1300);
  });

  it('never mints the same key id or secret twice in a large sample', () => {
    const keys = Array.from({ length: 5000 }, () => generateApiKey('test'));
    expect(new Set(keys.map((k) => k.keyId)).size).toBe(keys.length);
    expect(new Set(keys.map((k) => k.secret)).size).toBe(keys.length);
  });

  it('refuses any single-character change (a typo) through the checksum', () => {
    const alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
    fc.assert(
      fc.property(fc.nat(), fc.nat({ max: 61 }), (position, replacement) => {
        const { key } = generateApiKey('test');
        // Only the keyId and secret characters: changing the prefix is a format error anyway.
        const editable = key.length - 'svc_sk_test_'.length;
        const index = 'svc_sk_test_'.length + (position % editable);
        if (key[index] === '_' || key[index] === alphabet[replacement]) return;
        const typo = key.slice(0, index) + alphabet[replacement] + key.slice(index + 1);
        expect(parseApiKey(typo)).toBeNull();
      }),
      { numRuns: 500 },
    );
  });

  it.each([
    ['empty', ''],
    ['another prefix', 'sk_test_AAAAAAAAAAAAAAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB'],
    ['unknown environment', 'svc_sk_prod_AAAAAAAAAAAAAAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB'],
    ['short key id', 'svc_sk_test_AAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB'],
    ['short secret', 'svc_sk_test_AAAAAAAAAAAAAAAA_BBBBBBBB'],
    ['symbol in the secret', 'svc_sk_test_AAAAAAAAAAAAAAAA_BBBBBBBBBBBBBBBB-BBBBBBBBBBBBBBBBBBBBBB'],
    ['trailing space', 'svc_sk_test_AAAAAAAAAAAAAAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB '],
    ['very long', `svc_sk_test_AAAAAAAAAAAAAAAA_${'B'.repeat(10_000)}`],
  ])('refuses a malformed key: %s', (_label, text) => {
    expect(parseApiKey(text)).toBeNull();
  });

  it('refuses a well-formed key whose checksum does not hold', () => {
    const { key } = generateApiKey('live');
    const last = key.at(-1) === 'A' ? 'B' : 'A';
    expect(parseApiKey(key.slice(0, -1) + last)).toBeNull();
    // The environment is covered by the checksum: a test key relabelled live is not a live key.
    const test = generateApiKey('test').key;
    expect(parseApiKey(test.replace('svc_sk_test_', 'svc_sk_live_'))).toBeNull();
  });
});
