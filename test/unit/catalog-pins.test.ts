import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson, sha256Hex } from '../../src/content/hash.js';
import { manifestHashOf } from '../../src/import/catalog-pins.js';

describe('manifestHashOf (D12)', () => {
  it('hashes pin by pin exactly the canonical JSON of the pins, whatever their text', () => {
    const pin = fc.record({
      resourceId: fc.uuid(),
      resourceHumanRef: fc.string({ unit: 'binary' }),
      resourceVersionId: fc.uuid(),
      version: fc.string({ unit: 'binary', minLength: 1, maxLength: 80 }),
      contentHash: fc.string({ unit: 'grapheme', minLength: 32, maxLength: 128 }),
    });
    fc.assert(
      fc.property(fc.array(pin, { maxLength: 20 }), (pins) => {
        expect(manifestHashOf(pins)).toBe(sha256Hex(canonicalJson(pins)));
      }),
      { seed: 20261123, numRuns: 300 },
    );
  });
});
