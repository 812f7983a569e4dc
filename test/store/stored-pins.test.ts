import { v7 as uuidv7 } from 'uuid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readStoredPins } from '../../src/catalog-writes/catalog-pins.js';
import type { ResourcePin } from '../../src/schemas/playbook.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenCatalog, givenStoredPins } from '../helpers/fixtures.js';

/**
 * D20: a stored Catalog version's pins are read back a slice of their text per statement, on both
 * stacks, and come out exactly as stored: slices end between characters, never inside one, whatever
 * the characters (multi-byte, astral).
 */
describe('stored pins, read in slices', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  async function stored(pins: ResourcePin[]): Promise<string> {
    const catalog = await givenCatalog(backend.databases.primary, { slug: `pins-${pins.length}` });
    return givenStoredPins(backend.databases.primary, catalog.id, '1', pins);
  }

  const pin = (index: number): ResourcePin => ({
    resourceId: uuidv7(),
    // Characters of every width, so that slice edges fall inside multi-byte and astral ones.
    resourceHumanRef: `org/pins/résumé-${index}-✓-😀-${'ü'.repeat(index % 7)}`,
    resourceVersionId: uuidv7(),
    version: `1.${index}.0`,
    contentHash: 'c'.repeat(64),
  });

  it('several slices of text come back whole and in order', async () => {
    const pins = Array.from({ length: 12_000 }, (_, i) => pin(i));
    expect(JSON.stringify(pins).length).toBeGreaterThan(2 * (1 << 20));
    expect(await readStoredPins(backend.databases.primary, await stored(pins))).toEqual(pins);
  });

  it('no pins, and one', async () => {
    expect(await readStoredPins(backend.databases.primary, await stored([]))).toEqual([]);
    const one = [pin(1)];
    expect(await readStoredPins(backend.databases.primary, await stored(one))).toEqual(one);
  });
});
