import { v7 as uuidv7 } from 'uuid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PINS_PART_CHARS,
  readPinsText,
  readStoredPins,
  storedPinsText,
  writeStoredPins,
} from '../../src/catalog/stored-pins.js';
import type { ResourcePin } from '../../src/schemas/playbook.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { givenCatalog, givenStoredPins } from '../helpers/fixtures.js';

/**
 * D20, D30: a stored Catalog version's pins are stored in parts of their text, read back a few parts
 * per statement (or one, for a block of an answer written as it is read), on both stacks, and come
 * out exactly as stored: parts end between characters, never inside one, whatever the characters
 * (multi-byte, astral).
 */
describe('stored pins, read in parts', () => {
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

  it('many parts of text, more than a statement reads, come back whole and in order', async () => {
    const pins = Array.from({ length: 12_000 }, (_, i) => pin(i));
    expect(JSON.stringify(pins).length).toBeGreaterThan(2 * (1 << 20));
    const versionId = await stored(pins);
    const parts = await backend.databases.primary
      .selectFrom('catalog_version_pins')
      .select(['part', 'json'])
      .where('version_id', '=', versionId)
      .orderBy('part')
      .execute();
    // More parts than one statement reads (16), each at most a part's size, which join to the text.
    expect(parts.length).toBeGreaterThan(16);
    expect(parts.every((row) => row.json.length <= PINS_PART_CHARS)).toBe(true);
    expect(parts.map((row) => row.json).join('')).toBe(JSON.stringify(pins));
    expect(await readStoredPins(backend.databases.primary, versionId)).toEqual(pins);
    expect(await readPinsText(backend.databases.primary, versionId)).toBe(JSON.stringify(pins));
  });

  it('pins written from the slices they are made in are stored in the same parts as their whole text', async () => {
    const db = backend.databases.primary;
    const pins = Array.from({ length: 12_000 }, (_, i) => pin(i));
    const text = JSON.stringify(pins);
    const catalog = await givenCatalog(db, { slug: 'pins-sliced' });
    const partsOf = async (versionId: string) =>
      (
        await db
          .selectFrom('catalog_version_pins')
          .select(['part', 'json'])
          .where('version_id', '=', versionId)
          .orderBy('part')
          .execute()
      ).map((row) => [row.part, row.json]);
    const versionOf = async (label: string, write: (id: string) => Promise<void>) => {
      const id = uuidv7();
      await db
        .insertInto('catalog_versions')
        .values({
          id,
          catalog_id: catalog.id,
          version: label,
          manifest_hash: 'h'.repeat(64),
          resource_count: pins.length,
          published_at: new Date().toISOString(),
          created_at: new Date().toISOString(),
        })
        .execute();
      await write(id);
      return id;
    };
    const whole = await versionOf('whole', (id) => writeStoredPins(db, id, text));
    // Slices of uneven lengths, one ending between the halves of an astral character.
    const cut = text.indexOf('😀') + 1;
    async function* slices() {
      yield text.slice(0, cut);
      for (let at = cut; at < text.length; at += 7_777) yield text.slice(at, at + 7_777);
    }
    const sliced = await versionOf('sliced', (id) => writeStoredPins(db, id, slices()));
    const wholeParts = await partsOf(whole);
    expect(wholeParts.length).toBeGreaterThan(16);
    expect(await partsOf(sliced)).toEqual(wholeParts);
    expect(await readPinsText(db, sliced)).toBe(text);
  });

  it('read a part at a time for a streamed answer, the same text, with nothing read ahead of its reader', async () => {
    const db = backend.databases.primary;
    const pins = Array.from({ length: 12_002 }, (_, i) => pin(i));
    const versionId = await stored(pins);
    const read = async (reading: 'batches' | 'parts') => {
      const parts: string[] = [];
      for await (const part of storedPinsText(db, versionId, undefined, reading)) parts.push(part);
      return parts;
    };
    const byParts = await read('parts');
    expect(byParts.length).toBeGreaterThan(16);
    expect(byParts).toEqual(await read('batches'));
    expect(byParts.join('')).toBe(JSON.stringify(pins));

    // Parts taken from storage after the reader took the first two: read a part at a time, the third
    // is read only when asked for, and is gone by then; read in batches, it was held already.
    const takeThird = async (id: string, reading: 'batches' | 'parts') => {
      const parts = storedPinsText(db, id, undefined, reading);
      await parts.next();
      await parts.next();
      await db
        .deleteFrom('catalog_version_pins')
        .where('version_id', '=', id)
        .where('part', '>=', 2)
        .execute();
      try {
        return await parts.next();
      } finally {
        await parts.return(undefined);
      }
    };
    await expect(takeThird(versionId, 'parts')).rejects.toThrow(
      `no stored pins for catalog version ${versionId}`,
    );
    const third = await takeThird(await stored(pins.slice(0, 12_001)), 'batches');
    expect(third.done).toBe(false);
    expect(third.value).toBe(byParts[2]);
  });

  it('no pins, and one', async () => {
    expect(await readStoredPins(backend.databases.primary, await stored([]))).toEqual([]);
    const one = [pin(1)];
    expect(await readStoredPins(backend.databases.primary, await stored(one))).toEqual(one);
  });
});
