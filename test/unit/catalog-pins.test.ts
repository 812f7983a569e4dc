import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CatalogPins, manifestHashOf } from '../../src/catalog-writes/catalog-pins.js';
import { canonicalJson, sha256Hex } from '../../src/content/hash.js';

describe('manifestHashOf (D12)', () => {
  it('hashes pin by pin exactly the canonical JSON of the pins, whatever their text', async () => {
    const pin = fc.record({
      resourceId: fc.uuid(),
      resourceHumanRef: fc.string({ unit: 'binary' }),
      resourceVersionId: fc.uuid(),
      version: fc.string({ unit: 'binary', minLength: 1, maxLength: 80 }),
      contentHash: fc.string({ unit: 'grapheme', minLength: 32, maxLength: 128 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(pin, { maxLength: 20 }), async (pins) => {
        expect(await manifestHashOf(pins)).toBe(sha256Hex(canonicalJson(pins)));
      }),
      { seed: 20261123, numRuns: 300 },
    );
  });
});

describe('CatalogPins', () => {
  const source = (slug: string) => ({
    resourceId: `id-${slug}`,
    slug,
    versionId: `v-${slug}`,
    version: '1 "one" \\ ü',
    contentHash: 'f'.repeat(64),
  });

  it('pins in byte order of slugs, and stores exactly the JSON text of their array', async () => {
    const pins = new CatalogPins('org', 'handbook', ['b', 'a-b', 'a', 'B'].map(source));
    expect([...pins].map((pin) => pin.resourceHumanRef)).toEqual([
      'org/handbook/B',
      'org/handbook/a',
      'org/handbook/a-b',
      'org/handbook/b',
    ]);
    expect(pins.count).toBe(4);
    expect(await pins.json()).toBe(JSON.stringify([...pins]));
    expect(await new CatalogPins('svc', 'empty', []).json()).toBe('[]');
  });

  it('makes the text of 2,500 pins a thousand at a time, which joins to the text of their array', async () => {
    const pins = new CatalogPins(
      'org',
      'large',
      Array.from({ length: 2_500 }, (_, i) => source(`r-${i}`)),
    );
    const slices: string[] = [];
    for await (const slice of pins.jsonSlices()) slices.push(slice);
    // '[', three slices of pins (1,000, 1,000, 500), ']'.
    expect(slices).toHaveLength(5);
    expect(slices.join('')).toBe(JSON.stringify([...pins]));
  });
});
