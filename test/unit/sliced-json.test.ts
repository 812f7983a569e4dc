import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { nextTurn, SLICE_MS, yieldIfBusy } from '../../src/foundation/pace.js';
import { jsonListParts, jsonTextParts, RawJsonParts } from '../../src/foundation/sliced-json.js';

/** The parts jsonTextParts writes `value` in, joined. */
async function textOf(value: unknown): Promise<string> {
  let text = '';
  for await (const part of jsonTextParts(value)) text += part;
  return text;
}

/** D20: long work is done in slices, and the slices add up to what the work in one go makes. */
describe('work in slices', () => {
  it('jsonTextParts writes exactly what JSON.stringify writes', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), async (value) => {
        expect(await textOf(value)).toBe(JSON.stringify(value));
      }),
      { numRuns: 500 },
    );
  });

  it('lists longer than a slice, nested in objects, come out whole and in order', async () => {
    const report = {
      catalog: { pins: Array.from({ length: 2_345 }, (_, i) => ({ i, ref: `org/big/r-${i}` })) },
      skipped: undefined,
      lines: Array.from({ length: 3_001 }, (_, i) => `+ resource ${i} "quoted" \u2028`),
      empty: [],
    };
    expect(await textOf(report)).toBe(JSON.stringify(report));
  });

  it('writes an iterable that is not an array as a list, made a slice at a time as it is written (D30)', async () => {
    let made = 0;
    const lines = {
      length: 2_500,
      *[Symbol.iterator]() {
        for (let i = 0; i < 2_500; i++) {
          made++;
          yield `+ resource r-${i} "quoted"`;
        }
      },
    };
    const whole = JSON.stringify({ dryRun: false, lines: [...lines], none: [] });
    made = 0;
    const parts: string[] = [];
    // How many lines had been made when each part of the list came out: a slice, never the whole list.
    const madeAt: number[] = [];
    for await (const part of jsonTextParts({ dryRun: false, lines, none: [] })) {
      parts.push(part);
      madeAt.push(made);
    }
    expect(parts.join('')).toBe(whole);
    const firstLines = parts.findIndex((part) => part.startsWith('"+ resource r-0'));
    expect(madeAt[firstLines]).toBe(1_000);
    expect(madeAt.at(-1)).toBe(2_500);
    // An empty iterable is an empty list.
    const empty = { *[Symbol.iterator]() {} };
    expect(await textOf({ lines: empty })).toBe('{"lines":[]}');
  });

  it('jsonListParts writes any list as JSON.stringify writes its array: an array of a slice or less in one part, a longer list or an iterable a thousand elements a part', async () => {
    const partsOf = async (list: Iterable<unknown>) => {
      const parts: string[] = [];
      for await (const part of jsonListParts(list)) parts.push(part);
      return parts;
    };
    await fc.assert(
      fc.asyncProperty(fc.array(fc.jsonValue(), { maxLength: 30 }), async (array) => {
        const whole = JSON.stringify(array);
        expect(await partsOf(array)).toEqual([whole]);
        expect((await partsOf(new Set(array).values())).join('')).toBe(JSON.stringify([...new Set(array)]));
      }),
      { numRuns: 200 },
    );
    const array = Array.from({ length: 2_001 }, (_, i) => ({ i, line: `r-${i} "quoted" \u2028` }));
    const lengths = (parts: string[]) =>
      parts.map((part) => (part.length < 3 ? part : part.split('{').length - 1));
    for (const list of [array, array.values()]) {
      const parts = await partsOf(list);
      expect(parts.join('')).toBe(JSON.stringify(array));
      // '[', slices of 1,000, 1,000 and 1 elements, ']'.
      expect(lengths(parts)).toEqual(['[', 1_000, 1_000, 1, ']']);
    }
    expect(await partsOf(Array.from({ length: 1_000 }, (_, i) => i))).toHaveLength(1);
    expect((await partsOf([].values())).join('')).toBe('[]');
  });

  it('writes raw JSON parts in their place as they come, read only when the writer reaches them (D30)', async () => {
    const read: string[] = [];
    async function* stored() {
      for (const part of ['[{"a":', '1},', '{"b":"[]"}]']) {
        read.push(part);
        yield part;
      }
    }
    const value = {
      catalog: { id: 'c', currentVersion: { id: 'v', pins: new RawJsonParts(stored()), count: 2 } },
      lines: ['"pins":[]'],
    };
    const parts: string[] = [];
    const readAt: number[] = [];
    for await (const part of jsonTextParts(value)) {
      parts.push(part);
      readAt.push(read.length);
    }
    expect(parts.join('')).toBe(
      JSON.stringify({
        catalog: { id: 'c', currentVersion: { id: 'v', pins: [{ a: 1 }, { b: '[]' }], count: 2 } },
        lines: ['"pins":[]'],
      }),
    );
    // Nothing was read before the member's name was written, and each part was written as it was read.
    const named = parts.indexOf(',"pins":');
    expect(readAt[named]).toBe(0);
    expect(parts.slice(named + 1, named + 4)).toEqual(read);
    // As the whole value, from parts that are not made as they are read.
    expect(await textOf(new RawJsonParts(['{"x":', '[]}']))).toBe('{"x":[]}');
    // JSON.stringify, which a list's slice is written by, cannot write them, and says so.
    expect(() => JSON.stringify([new RawJsonParts(['1'])])).toThrow(TypeError);
  });

  it('yieldIfBusy lets timers run once work has held the event loop for a slice, and not before', async () => {
    let ticked = 0;
    const timer = setInterval(() => ticked++, 1);
    const spin = (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until) {}
    };
    // Short work after a turn: no turn. A machine that stops the process for a slice's length in
    // between (a shared machine does, now and then) makes the work long, and then it must turn: such an
    // attempt says nothing of short work and is made again.
    let afterShortWork: number | undefined;
    for (let attempt = 0; attempt < 5 && afterShortWork === undefined; attempt++) {
      await nextTurn();
      const started = performance.now();
      const before = ticked;
      spin(2);
      const spun = performance.now() - started;
      await yieldIfBusy();
      if (spun < SLICE_MS / 2) afterShortWork = ticked - before;
    }
    expect(afterShortWork).toBe(0);
    const beforeSlices = ticked;
    for (let slice = 0; slice < 5; slice++) {
      spin(SLICE_MS + 5);
      // A turn of the event loop: due timers run before the work goes on.
      await yieldIfBusy();
    }
    clearInterval(timer);
    expect(ticked - beforeSlices).toBeGreaterThanOrEqual(4);
  });
});
