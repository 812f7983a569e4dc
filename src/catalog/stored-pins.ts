import type { Db } from '../db/tables.js';
import { parseJsonParts } from '../foundation/sliced-json.js';
import { partEnd, textParts } from '../foundation/text-parts.js';
import type { ResourcePin } from '../schemas/playbook.js';

/**
 * The stored JSON text of a Catalog version's pins (`[{…},…]`, exactly as the contract writes them),
 * in parts of at most `PINS_PART_CHARS` characters, a row each (migration 0012). A version of 100,000
 * Resources pins 20 MB of text: a slice of one stored value costs a read of it from its start (SQLite
 * loads the whole value; PostgreSQL's `substr` of UTF-8 text fetches, and decompresses, everything up
 * to the slice), so reading one a slice at a time cost time that grew with the square of its length.
 * A part is read by its key. A version's pins never change once written, so parts read at different
 * times fit together.
 */

/** Characters (UTF-16 code units) of pins in one stored part. */
export const PINS_PART_CHARS = 64 * 1024;
/** Parts read or written per statement (after a version's first, when read): about a mebibyte of text. */
const PARTS_PER_STATEMENT = 16;

/**
 * Stores the pins of the version `versionId` (whose row is written already), through `db`: `text` whole,
 * or as the slices it is made in (a version of 100,000 pins is 20 MB of text, never held whole then).
 * The parts are the same either way.
 */
export async function writeStoredPins(
  db: Db,
  versionId: string,
  text: string | AsyncIterable<string>,
): Promise<void> {
  let part = 0;
  let batch: string[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    const values = batch.map((json, index) => ({ version_id: versionId, part: part + index, json }));
    part += batch.length;
    batch = [];
    await db.insertInto('catalog_version_pins').values(values).execute();
  };
  const put = async (json: string) => {
    batch.push(json);
    if (batch.length === PARTS_PER_STATEMENT) await flush();
  };
  if (typeof text === 'string') {
    for (const json of textParts(text, PINS_PART_CHARS)) await put(json);
    return flush();
  }
  // Cut as `textParts` cuts the whole: a part is cut only once more text is known to follow it.
  let pending = '';
  for await (const slice of text) {
    pending += slice;
    while (pending.length > PINS_PART_CHARS) {
      const end = partEnd(pending, 0, PINS_PART_CHARS);
      await put(pending.slice(0, end));
      pending = pending.slice(end);
    }
  }
  await put(pending);
  await flush();
}

/** The first part of a version's pins, and how many parts it has. */
export interface PinsHead {
  readonly first: string;
  readonly parts: number;
}

/**
 * The first part of each version's pins (the whole of most) and its count of parts, in one statement:
 * what a page of Catalogs reads before it reads the rest of a large version a few parts at a time.
 */
export async function readPinsHeads(db: Db, versionIds: readonly string[]): Promise<Map<string, PinsHead>> {
  if (versionIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('catalog_version_pins as p')
    .select((eb) => [
      'p.version_id',
      'p.json',
      eb
        .selectFrom('catalog_version_pins as c')
        .select((count) => count.fn.countAll<number | string>().as('parts'))
        .whereRef('c.version_id', '=', 'p.version_id')
        .as('parts'),
    ])
    .where('p.version_id', 'in', [...versionIds])
    .where('p.part', '=', 0)
    .execute();
  return new Map(rows.map((row) => [row.version_id, { first: row.json, parts: Number(row.parts) }]));
}

/** Parts `from` to `from + count - 1` of a version's pins, in order. */
async function readPinsParts(db: Db, versionId: string, from: number, count: number): Promise<string[]> {
  const rows = await db
    .selectFrom('catalog_version_pins')
    .select('json')
    .where('version_id', '=', versionId)
    .where('part', '>=', from)
    .where('part', '<', from + count)
    .orderBy('part')
    .execute();
  return rows.map((row) => row.json);
}

/**
 * How `storedPinsText` reads: `batches`, a statement per `PARTS_PER_STATEMENT` parts, for a reader
 * that takes the parts as fast as they come; `parts`, a statement per part, for one that takes a part
 * per turn of the event loop (an answer written as it is read, D30). Parts read ahead of such a reader
 * wait across turns, outlive V8's young collections and are copied to the old generation, where they
 * are let go only by a full collection: under a mixed load with a list of 100,000 pins asked for once
 * a second, that kept the heap about 15 MB larger (`npm run bench:scale`).
 */
export type PinsReading = 'batches' | 'parts';

/**
 * A version's pins, part by part after its head (read here unless given), as `reading` says: reading
 * stops when the iteration does, and each part is let go once yielded.
 */
export async function* storedPinsText(
  db: Db,
  versionId: string,
  head?: PinsHead,
  reading: PinsReading = 'batches',
): AsyncGenerator<string> {
  const { first, parts } =
    head ?? (await readPinsHeads(db, [versionId])).get(versionId) ?? missing(versionId);
  if (first.length > 0) yield first;
  const perStatement = reading === 'parts' ? 1 : PARTS_PER_STATEMENT;
  for (let from = 1; from < parts; from += perStatement) {
    const count = Math.min(perStatement, parts - from);
    const read = await readPinsParts(db, versionId, from, count);
    // Parts the head counted and storage no longer holds: a text cut short is never yielded as whole.
    if (read.length < count) missing(versionId);
    yield* read;
  }
}

/**
 * The whole stored text of each version's pins, by version id, in the parts it is stored in: the
 * first parts in one statement, the rest of a large version after. For what holds the text whole (a
 * page of the sync feed, whose pins are bounded by its budget, writes the parts straight into its
 * answer's bytes; a test).
 */
export async function readPinsTexts(
  db: Db,
  versionIds: readonly string[],
): Promise<Map<string, readonly string[]>> {
  const texts = new Map<string, readonly string[]>();
  for (const [versionId, head] of await readPinsHeads(db, versionIds)) {
    const parts: string[] = [];
    for await (const part of storedPinsText(db, versionId, head)) parts.push(part);
    texts.set(versionId, parts);
  }
  return texts;
}

/** The whole stored text of a version's pins. */
export async function readPinsText(db: Db, versionId: string): Promise<string> {
  return ((await readPinsTexts(db, [versionId])).get(versionId) ?? missing(versionId)).join('');
}

/**
 * The pins of a stored Catalog version, parsed part by part as they are read (D20): the pins of
 * 100,000 Resources are 20 MB of JSON, which one parse would make in a single turn of the event loop,
 * and which are never held whole as text.
 */
export async function readStoredPins(db: Db, versionId: string): Promise<ResourcePin[]> {
  return (await parseJsonParts(storedPinsText(db, versionId))) as ResourcePin[];
}

function missing(versionId: string): never {
  throw new Error(`no stored pins for catalog version ${versionId}`);
}
