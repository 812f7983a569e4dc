import { type ParsedTokenInfo, Tokenizer, TokenParser, TokenType } from '@streamparser/json';
import { yieldIfBusy } from './pace.js';

/** Elements of a long list written in one go; then the event loop may turn. */
const ELEMENTS_PER_SLICE = 1000;

/**
 * JSON text already written, in parts, that {@link jsonTextParts} writes in its place as the parts come:
 * a Catalog version's pins as stored, 20 MB for 100,000 Resources, are read a part at a time as the
 * answer that holds them is sent, never parsed or held whole (D30). The parts are read once, when the
 * writer reaches them.
 */
export class RawJsonParts {
  constructor(readonly parts: Iterable<string> | AsyncIterable<string>) {}

  /**
   * `JSON.stringify` cannot write the parts (nor can a list's slice, which it writes): it refuses
   * rather than write the holder as `{}`.
   */
  toJSON(): never {
    throw new TypeError(
      'raw JSON parts are written by jsonTextParts, as an object member or the whole value',
    );
  }
}

/**
 * The JSON text of `value`, as `JSON.stringify` writes it, in the parts it is made in, for an answer
 * written while it is made: a list of thousands (the report of a 100,000-Resource publish) is written a
 * thousand elements at a time, and the event loop turns between slices when the work has held it for
 * long (D20). Besides plain data (strings, numbers, booleans, null, arrays, objects), `value` may hold
 * iterables other than arrays (a report's lines made from its plan as they are written, D30): each is
 * written as a list by {@link jsonListParts}, a slice of its elements at a time.
 * A {@link RawJsonParts} at the top or as an object's member is written as its parts, as they come.
 */
export async function* jsonTextParts(value: unknown): AsyncGenerator<string> {
  if (value instanceof RawJsonParts) {
    yield* value.parts;
    return;
  }
  if (Array.isArray(value) || isLazyList(value)) {
    yield* jsonListParts(value);
    return;
  }
  if (typeof value === 'object' && value !== null) {
    yield '{';
    let first = true;
    for (const [name, inner] of Object.entries(value)) {
      if (inner === undefined) continue;
      yield `${first ? '' : ','}${JSON.stringify(name)}:`;
      first = false;
      yield* jsonTextParts(inner);
    }
    yield '}';
    return;
  }
  yield JSON.stringify(value) ?? 'null';
}

/**
 * The JSON text of a list, as `JSON.stringify` writes its array, made a thousand elements at a time
 * with the event loop let turn between slices when the work has held it for long (D20): only that
 * slice of the elements is ever made and held, so an iterable that makes its elements as it is read
 * (a report's lines, a Catalog's pins) is written without being held whole (D30). An array of a slice
 * or less is written in one part.
 */
export async function* jsonListParts(list: Iterable<unknown>): AsyncGenerator<string> {
  if (Array.isArray(list) && list.length <= ELEMENTS_PER_SLICE) {
    yield JSON.stringify(list);
    return;
  }
  yield '[';
  let slice: unknown[] = [];
  let first = true;
  const flush = () => {
    const text = JSON.stringify(slice).slice(1, -1);
    const part = first ? text : `,${text}`;
    first = false;
    slice = [];
    return part;
  };
  for (const element of list) {
    slice.push(element);
    if (slice.length === ELEMENTS_PER_SLICE) {
      yield flush();
      await yieldIfBusy();
    }
  }
  if (slice.length > 0) yield flush();
  yield ']';
}

/** An iterable that is not an array, a string or a plain object's JSON: written as a list. */
function isLazyList(value: unknown): value is Iterable<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Partial<Iterable<unknown>>)[Symbol.iterator] === 'function' &&
    typeof (value as { toJSON?: unknown }).toJSON !== 'function'
  );
}

/** Bytes (or characters) tokenized between two looks at the clock: about a millisecond's work. */
const SLICE_BYTES = 64 * 1024;

/** A JSON text nested deeper than the reader's limit, and where: `resources[3].manifest.a…`. */
export class TooDeepError extends Error {
  override name = 'TooDeepError';
  constructor(
    readonly path: string,
    readonly maxDepth: number,
  ) {
    super(`nests deeper than ${maxDepth} levels at ${path || 'the top'}`);
  }
}

/** Segments of a too-deep field's path that its name shows; the rest is elided. */
const SHOWN_SEGMENTS = 8;

/** One open object or array, as the path of a too-deep field names it. */
interface Frame {
  readonly array: boolean;
  /** The member's name or the element's index last seen in this container. */
  at: string | number | undefined;
  /** In an object: the next string is a member's name. */
  expectingName: boolean;
}

/**
 * A JSON text read a slice at a time: nesting is counted as the tokens arrive, so a text deeper than
 * the limit is refused before any value of it is built, and a text of megabytes lets the event loop
 * turn between slices rather than holding it for the whole parse. Values are built as `JSON.parse`
 * builds them: own properties only, `__proto__` a key like any other, lone surrogates kept as they are.
 */
class SlicedJsonReader {
  // Strings are gathered in buffers of this size rather than in one piece per escape: a string of
  // 30 MB with a million escapes, joined at its end, took more than a second in one go.
  private readonly tokenizer = new Tokenizer({ stringBufferSize: 64 * 1024 });
  private readonly parser = new TokenParser({ paths: ['$'] });
  private readonly frames: Frame[] = [];
  private value: unknown;
  private done = false;

  constructor(private readonly maxDepth: number) {
    this.parser.onValue = ({ value }) => {
      this.value = value;
      this.done = true;
    };
    this.tokenizer.onToken = (token) => {
      this.follow(token);
      this.parser.write(token);
    };
    // The library's defaults rethrow; they are set here so that a failure is ours to word.
    this.tokenizer.onError = (error) => {
      throw error;
    };
    this.parser.onError = (error) => {
      throw error;
    };
  }

  write(bytes: Uint8Array | string): void {
    this.tokenizer.write(bytes);
  }

  end(): unknown {
    // A number at the very end of the text is only complete once the tokenizer knows nothing follows.
    if (!this.tokenizer.isEnded) this.tokenizer.end();
    if (!this.done) throw new SyntaxError('unexpected end of the JSON text');
    return this.value;
  }

  /** Keeps the path of the token being read, and refuses a container past the depth limit. */
  private follow({ token, value }: Omit<ParsedTokenInfo, 'offset'>): void {
    const top = this.frames.at(-1);
    switch (token) {
      case TokenType.LEFT_BRACE:
      case TokenType.LEFT_BRACKET: {
        if (this.frames.length >= this.maxDepth) throw new TooDeepError(this.pathName(), this.maxDepth);
        const array = token === TokenType.LEFT_BRACKET;
        this.frames.push({ array, at: array ? 0 : undefined, expectingName: !array });
        return;
      }
      case TokenType.RIGHT_BRACE:
      case TokenType.RIGHT_BRACKET:
        this.frames.pop();
        return;
      case TokenType.COMMA:
        if (top?.array === true) top.at = (top.at as number) + 1;
        else if (top) top.expectingName = true;
        return;
      case TokenType.STRING:
        if (top && !top.array && top.expectingName) {
          top.at = value as string;
          top.expectingName = false;
        }
        return;
      default:
        return;
    }
  }

  /** The path to the container being opened, as fields are named elsewhere: `resources[3].manifest.a`. */
  private pathName(): string {
    let path = '';
    for (const frame of this.frames.slice(0, SHOWN_SEGMENTS)) {
      if (frame.at === undefined) continue;
      path += frame.array ? `[${frame.at}]` : path === '' ? String(frame.at) : `.${String(frame.at)}`;
    }
    if (this.frames.length > SHOWN_SEGMENTS) path += '…';
    return path;
  }
}

/**
 * The value of a JSON text, as `JSON.parse` makes it, read a slice at a time with turns of the event
 * loop between slices (D20), from the parts it comes in, each read as it comes: a text stored in parts
 * (a Catalog version's pins) or a body in the parts it arrived in is never joined whole. Nesting past
 * `maxDepth` throws {@link TooDeepError} before anything deeper is read; a text that is not JSON
 * throws the parser's error.
 */
export async function parseJsonParts(
  parts: Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string>,
  maxDepth = Number.POSITIVE_INFINITY,
): Promise<unknown> {
  const reader = new SlicedJsonReader(maxDepth);
  for await (const text of parts) {
    for (let offset = 0; offset < text.length; offset += SLICE_BYTES) {
      reader.write(
        typeof text === 'string'
          ? text.slice(offset, offset + SLICE_BYTES)
          : text.subarray(offset, offset + SLICE_BYTES),
      );
      await yieldIfBusy();
    }
  }
  return reader.end();
}
