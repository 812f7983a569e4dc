import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SLICE_MS, yieldIfBusy } from '../../src/foundation/pace.js';
import { jsonListParts, jsonTextParts, stringifyInSlices } from '../../src/foundation/sliced-json.js';

/** D20: long work is done in slices, and the slices add up to what the work in one go makes. */
describe('work in slices', () => {
  it('stringifyInSlices writes exactly what JSON.stringify writes', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), async (value) => {
        expect(await stringifyInSlices(value)).toBe(JSON.stringify(value));
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
    expect(await stringifyInSlices(report)).toBe(JSON.stringify(report));
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
    let text = '';
    for await (const part of jsonTextParts({ lines: empty })) text += part;
    expect(text).toBe('{"lines":[]}');
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

  it('yieldIfBusy lets timers run once work has held the event loop for a slice, and not before', async () => {
    // An idle spell before the first call: its turn is taken at once.
    await yieldIfBusy();
    let ticked = 0;
    const timer = setInterval(() => ticked++, 1);
    const spin = (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until) {}
    };
    spin(2);
    await yieldIfBusy();
    const afterShortWork = ticked;
    for (let slice = 0; slice < 5; slice++) {
      spin(SLICE_MS + 5);
      // A turn of the event loop: due timers run before the work goes on.
      await yieldIfBusy();
    }
    clearInterval(timer);
    expect(afterShortWork).toBe(0);
    expect(ticked).toBeGreaterThanOrEqual(4);
  });
});
