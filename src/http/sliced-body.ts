import { type Static, type TObject, type TSchema, Type } from '@sinclair/typebox';
import { ContentTooLargeError, InputError, type InputProblem } from '../foundation/errors.js';
import { yieldIfBusy } from '../foundation/pace.js';
import { holdsAtMost } from '../foundation/value-size.js';
import { MAX_LISTED_PROBLEMS } from '../schemas/common.js';
import { compileCheckNow, type SchemaCheck, type SchemaError } from '../schemas/schema-check.js';
import { onePerField } from './problem.js';

/** D20: checking stops here; the answer lists the first 20 and says that more may follow. */
const MAX_CHECKED_PROBLEMS = MAX_LISTED_PROBLEMS + 1;

/**
 * A part of a body (its fields, or one element of its list) is described problem by problem when it
 * has at most this many keys and list elements, and no text longer than {@link DESCRIBED_TEXT}; a
 * larger one is described by its first problem. Listing every problem of a part costs as much as the
 * part holds (a Resource of 100,000 unknown fields is 100,000 problems; a title of millions of
 * characters is checked against its pattern even when it is already too long, and a pattern over
 * millions of characters can exhaust the stack), so the bound is on the part, not only on the list.
 */
const DESCRIBED_PARTS = 100;
const DESCRIBED_TEXT = 64 * 1024;

/** Body schemas whose routes check their bodies with {@link SlicedBody}, not with Fastify's validator. */
const checkedInSlices = new WeakSet<object>();

/** True for a body schema that its route checks in slices: the app's validator leaves it alone. */
export function isCheckedInSlices(schema: unknown): boolean {
  return typeof schema === 'object' && schema !== null && checkedInSlices.has(schema);
}

/** Every problem of a describable value, or the first one (already found by `first`) otherwise. */
function problemsOf(first: SchemaCheck, every: SchemaCheck, value: unknown): SchemaError[] {
  if (holdsAtMost(value, DESCRIBED_PARTS, DESCRIBED_TEXT)) {
    try {
      if (!every(value)) return every.errors ?? [];
    } catch {
      // A pattern that gives up on its input: the first problem is still known.
    }
  }
  return first.errors ?? [];
}

/**
 * A request body checked against its schema by its route rather than by Fastify's validator, which
 * checks a body in one go with every problem: here checking never holds the event loop for long nor
 * collects more problems than an answer lists (D20). The fields first; then, for a body with a long
 * list (a published Catalog's Resources), the list's length (413 past the deployment's cap) and each
 * element, turning the event loop between slices; checking stops at the 21st problem. The schema is
 * the route's, whole, for the document and the types (`isCheckedInSlices` tells the app's validator
 * to leave it alone).
 */
export class SlicedBody<T extends TObject> {
  private readonly headFirst: SchemaCheck;
  private readonly headEvery: SchemaCheck;
  private readonly item: { readonly first: SchemaCheck; readonly every: SchemaCheck } | undefined;

  /** @param listField the long list, checked element by element; none for a body of fields alone. */
  constructor(
    readonly schema: T,
    private readonly listField?: keyof T['properties'] & string,
  ) {
    // The fields around the list, and the list as a list of anything: its elements come one by one.
    const head =
      listField === undefined
        ? schema
        : Type.Object(
            { ...schema.properties, [listField]: Type.Array(Type.Unknown()) },
            { additionalProperties: schema.additionalProperties },
          );
    this.headFirst = compileCheckNow(head, false);
    this.headEvery = compileCheckNow(head, true);
    if (listField !== undefined) {
      const items = (schema.properties[listField] as TSchema & { items: TSchema }).items;
      this.item = { first: compileCheckNow(items, false), every: compileCheckNow(items, true) };
    }
    checkedInSlices.add(schema);
  }

  /**
   * Resolves with the body when it is valid; otherwise throws {@link InputError} (400) naming up to 21
   * fields, or {@link ContentTooLargeError} (413) when the list holds more than `maxItems`.
   */
  async check(body: unknown, maxItems = Number.POSITIVE_INFINITY): Promise<Static<T>> {
    const problems: InputProblem[] = [];
    let stoppedEarly = false;
    const full = () => problems.length >= MAX_CHECKED_PROBLEMS;
    // `first` has just refused the value: its one problem is known whatever the value's size.
    const describe = (first: SchemaCheck, every: SchemaCheck, value: unknown, at: string) => {
      const errors = problemsOf(first, every, value).map((error) => ({
        ...error,
        instancePath: at + error.instancePath,
      }));
      for (const problem of onePerField('body', errors)) {
        if (full()) {
          stoppedEarly = true;
          return;
        }
        problems.push(problem);
      }
    };

    if (!this.headFirst(body)) describe(this.headFirst, this.headEvery, body, '');
    const { item, listField } = this;
    const list = listField === undefined ? undefined : (body as Record<string, unknown> | null)?.[listField];
    if (item === undefined || !Array.isArray(list)) {
      if (problems.length > 0) throw new InputError(problems, stoppedEarly);
      return body as Static<T>;
    }
    if (list.length > maxItems) {
      throw new ContentTooLargeError(
        `${listField} holds ${list.length} items; one request may hold at most ${maxItems}`,
      );
    }
    let index = 0;
    for (; index < list.length && !full(); index++) {
      const element = list[index];
      if (!item.first(element)) describe(item.first, item.every, element, `/${listField}/${index}`);
      await yieldIfBusy();
    }
    if (index < list.length) stoppedEarly = true;
    if (problems.length > 0) throw new InputError(problems, stoppedEarly);
    return body as Static<T>;
  }
}
