import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { finished, Readable } from 'node:stream';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { Negotiator } from '@fastify/accept-negotiator';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { LRUCache } from 'lru-cache';
import pLimit from 'p-limit';
import { type ContentCoding, noneMatchNames, representationTag } from './conditional.js';
import { StreamedAnswer } from './streamed-answer.js';

/**
 * The one read path's answers and the one function that sends them (D11, D19). Every successful read
 * is an `Answer`, or a `LazyAnswer` whose body is made only when it must be sent. `sendAnswer` alone
 * sets `ETag`, `Cache-Control` and `Vary`, answers `If-None-Match` with 304 on GET and HEAD, and
 * chooses and applies the content encoding.
 */

export type Encoding = ContentCoding;

/** D19: smaller answers gain too little from compression to pay for the `Content-Encoding`. */
export const MIN_COMPRESSED_BYTES = 1024;
/**
 * Compressed on the request's own thread up to this size: about 3 ms of brotli at the quality below.
 * Larger bodies go to libuv's pool, a few at a time (`POOL_COMPRESSIONS`).
 */
const SYNC_COMPRESSION_MAX_BYTES = 256 * 1024;
/** A middle quality: compression happens once per answer kept, but on the request's time. */
const BROTLI_QUALITY = 6;

export const CACHE_CONTROL = 'private, no-cache';
/** Every header that decides an answer's bytes (D11): the credential, the account, the encoding. */
export const VARY = 'x-api-key, authorization, x-account-id, accept-encoding';
export const JSON_TYPE = 'application/json; charset=utf-8';

const brotliOptions = (size: number): zlib.BrotliOptions => ({
  params: {
    [zlib.constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
    [zlib.constants.BROTLI_PARAM_SIZE_HINT]: size,
  },
});
const brotliAsync = promisify(zlib.brotliCompress);
const gzipAsync = promisify(zlib.gzip);

/**
 * How many compressions run on libuv's pool at once: one per core the request thread leaves free, and
 * no more than the pool's four threads. An encoder holds megabytes of native memory from the moment it
 * is made, before its turn on the pool comes: fifty requests for fifty large answers not yet
 * compressed, each made at once, held fifty encoders and a hundred megabytes.
 */
export const POOL_COMPRESSIONS = Math.min(4, Math.max(1, availableParallelism() - 1));
const onPool = pLimit(POOL_COMPRESSIONS);

function compress(encoding: Encoding, body: Buffer): Buffer | Promise<Buffer> {
  if (body.length <= SYNC_COMPRESSION_MAX_BYTES) {
    return encoding === 'br'
      ? zlib.brotliCompressSync(body, brotliOptions(body.length))
      : zlib.gzipSync(body);
  }
  return onPool(() => (encoding === 'br' ? brotliAsync(body, brotliOptions(body.length)) : gzipAsync(body)));
}

/**
 * `bytes` in memory of their own size. A small Buffer is a slice of a slab it shares (Node's 8 KiB
 * pool), and zlib's output a slice of its 16 KiB working chunk; kept for minutes, a slice keeps all of
 * its memory alive. A kept detail of 2 KB with its br form of 700 bytes held 24 KiB that way, eight
 * times what the answers' budget counts it as, so the budget bounded a small part of what answers held.
 */
function owned(bytes: Buffer): Buffer {
  if (bytes.byteLength === bytes.buffer.byteLength) return bytes;
  const copy = Buffer.allocUnsafeSlow(bytes.byteLength);
  bytes.copy(copy);
  return copy;
}

/** The strong validator of `body`'s identity form: the first 192 bits of its SHA-256, base64url. */
export function tagOf(body: Buffer | string): string {
  return createHash('sha256').update(body).digest('base64url').slice(0, 32);
}

/**
 * A JSON answer's bytes, its validator, and its compressed forms, each made once, on first demand. An
 * answer kept in memory is compressed once however often it is sent.
 */
export class Answer {
  /** The identity form, in memory of its own (see `owned`): an answer is made to be kept. */
  readonly body: Buffer;

  private readonly forms: { br?: Buffer | Promise<Buffer>; gzip?: Buffer | Promise<Buffer> } = {};
  /** Told when a compressed form is added, so that whoever holds the answer can count its bytes again. */
  onGrow: (() => void) | undefined;

  /**
   * @param body the UTF-8 JSON text
   * @param tag what the validator is made of; by default the body's digest. An answer made from a
   *   `LazyAnswer` keeps the lazy answer's tag, so that both validate alike.
   */
  constructor(
    body: Buffer,
    readonly tag: string = tagOf(body),
    /** How its compressed forms are made, when not as every kept answer's are (see `StreamedAnswer`). */
    private readonly encode?: (encoding: Encoding, body: Buffer) => Promise<Buffer>,
  ) {
    this.body = owned(body);
  }

  static json(text: string, tag?: string): Answer {
    return Answer.jsonOf([text], tag);
  }

  /**
   * The answer of the JSON text `pieces` make one after the other, written into its bytes piece by
   * piece: a text of tens of megabytes (a sync page with a large Catalog's pins) is never joined into
   * one string beside them.
   */
  static jsonOf(pieces: readonly string[], tag?: string): Answer {
    let size = 0;
    for (const piece of pieces) size += Buffer.byteLength(piece);
    // Written into memory of its own size at once: `Buffer.from` would make a small body a slice of
    // the shared slab, for `owned` to copy.
    const body = Buffer.allocUnsafeSlow(size);
    let at = 0;
    for (const piece of pieces) at += body.write(piece, at);
    if (at !== size) throw new Error(`an answer's pieces wrote ${at} of their ${size} bytes`);
    return new Answer(body, tag);
  }

  /** Bytes held: the body and the compressed forms made so far. */
  get bytes(): number {
    let total = this.body.length;
    for (const form of [this.forms.br, this.forms.gzip]) if (Buffer.isBuffer(form)) total += form.length;
    return total;
  }

  encoded(encoding: Encoding): Buffer | Promise<Buffer> {
    const held = this.forms[encoding];
    if (held !== undefined) return held;
    const made = this.encode ? this.encode(encoding, this.body) : compress(encoding, this.body);
    if (Buffer.isBuffer(made)) return this.keep(encoding, made);
    const pending = made.then(
      (bytes) => this.keep(encoding, bytes),
      (error: unknown) => {
        delete this.forms[encoding];
        throw error;
      },
    );
    this.forms[encoding] = pending;
    return pending;
  }

  private keep(encoding: Encoding, made: Buffer): Buffer {
    const bytes = owned(made);
    this.forms[encoding] = bytes;
    this.onGrow?.();
    return bytes;
  }
}

/**
 * An answer whose validator is known before its body: a Resource Version's, whose content is loaded
 * only when it must be sent, so that a revalidation (304) never loads content.
 */
export interface LazyAnswer {
  readonly tag: string;
  /** No more bytes than the body will have: enough to choose the encoding without the body. */
  readonly minBytes: number;
  load(): Promise<Answer>;
}

/** An answer too large to hold, written as it is read (streamed-answer.ts). */
export type ReadAnswer = Answer | LazyAnswer | StreamedAnswer;

const encodings = new Negotiator<Encoding | 'identity'>({
  supportedValues: ['br', 'gzip', 'identity'],
  // Header values are the caller's to choose: the memo of their outcomes is bounded.
  cache: new LRUCache<string, string>({ max: 1000 }),
});

/** The encoding the request prefers among those the service makes: br, then gzip (D19). */
export function negotiateEncoding(acceptEncoding: string | undefined): Encoding | undefined {
  if (acceptEncoding === undefined || acceptEncoding === '') return undefined;
  const chosen = encodings.negotiate(acceptEncoding);
  return chosen === 'br' || chosen === 'gzip' ? chosen : undefined;
}

/** The serializer Fastify compiled from the route's 200 response schema: answers are made with it. */
export function routeSerializer<T>(reply: FastifyReply): (value: T) => string {
  const serialize = reply.getSerializationFunction('200');
  if (!serialize) throw new Error('a read route without a 200 response schema');
  return serialize as unknown as (value: T) => string;
}

/**
 * Sends a read's answer, the one way every read is sent: its representation for the request's
 * `Accept-Encoding`, that representation's strong `ETag`, `Cache-Control: private, no-cache` and
 * `Vary`; a 304 without a body when `If-None-Match` names the validator, on GET and HEAD alike.
 *
 * An answer held in memory is sent at once, without a promise (the common case of a busy service,
 * where each promise is a measurable part of a request); one still being made, or a lazy answer's
 * body, is waited for.
 *
 * @example
 * app.get(path, options, (request, reply) => sendAnswer(request, reply, service.read(…)));
 */
export function sendAnswer(
  request: FastifyRequest,
  reply: FastifyReply,
  answer: ReadAnswer | Promise<ReadAnswer>,
): void | Promise<void> {
  if (answer instanceof Promise) {
    return answer.then((made) => {
      if (!(made instanceof StreamedAnswer)) return sendAnswer(request, reply, made);
      sendStreamed(request, reply, made);
      // A handler's promise that settles before a stream's first bytes set the headers off would make
      // Fastify answer again, with nothing: it settles once the answer is written.
      return new Promise<void>((resolve) => finished(reply.raw, () => resolve()));
    });
  }
  if (answer instanceof StreamedAnswer) return sendStreamed(request, reply, answer);
  if (!(answer instanceof Answer)) return sendLazy(request, reply, answer);
  const encoding = answer.body.length >= MIN_COMPRESSED_BYTES ? encodingOf(request) : undefined;
  if (revalidated(request, reply, answer.tag, encoding)) {
    reply.code(304).send();
  } else if (encoding === undefined) {
    reply.type(JSON_TYPE).send(answer.body);
  } else {
    const body = answer.encoded(encoding);
    if (body instanceof Promise) return body.then((bytes) => sendEncoded(reply, encoding, bytes));
    sendEncoded(reply, encoding, body);
  }
}

/**
 * An answer written as it is read: its representation's validator first (a 304 reads nothing more),
 * then the body in the negotiated encoding, chunked, from a stream of its own made as the socket takes
 * it; none for HEAD. A client that goes away ends its stream (Fastify destroys the stream it was sent),
 * and one that takes nothing for as long as a request may take to arrive (D20, Node's
 * `requestTimeout`; never when it is 0) has its connection closed: either way storage is read no more.
 */
function sendStreamed(request: FastifyRequest, reply: FastifyReply, streamed: StreamedAnswer): void {
  const encoding = encodingOf(request);
  if (revalidated(request, reply, streamed.tag, encoding)) {
    reply.code(304).send();
    return;
  }
  reply.type(JSON_TYPE);
  if (encoding !== undefined) reply.header('content-encoding', encoding);
  const stallMs = reply.server.server.requestTimeout || Number.POSITIVE_INFINITY;
  reply.send(request.method === 'HEAD' ? Readable.from([]) : streamed.open(encoding, stallMs));
}

/** A lazy answer: a revalidation is answered from its validator, without making its body. */
async function sendLazy(request: FastifyRequest, reply: FastifyReply, lazy: LazyAnswer): Promise<void> {
  // One that may be too small to compress is made at once: the encoding depends on its size.
  if (lazy.minBytes >= MIN_COMPRESSED_BYTES && revalidated(request, reply, lazy.tag, encodingOf(request))) {
    reply.code(304).send();
    return;
  }
  // The body keeps the lazy answer's validator, and is at least as large: the same encoding is chosen.
  return sendAnswer(request, reply, await lazy.load());
}

function encodingOf(request: FastifyRequest): Encoding | undefined {
  return negotiateEncoding(request.headers['accept-encoding']);
}

/** Sets the validator and caching headers of the representation; whether `If-None-Match` names it. */
function revalidated(
  request: FastifyRequest,
  reply: FastifyReply,
  tag: string,
  encoding: Encoding | undefined,
): boolean {
  // Each encoding is a representation of its own, with a tag of its own (D19).
  const etag = representationTag(tag, encoding);
  reply.header('cache-control', CACHE_CONTROL).header('vary', VARY).header('etag', etag);
  return noneMatchNames(request.headers['if-none-match'], etag);
}

function sendEncoded(reply: FastifyReply, encoding: Encoding, body: Buffer): void {
  reply.type(JSON_TYPE).header('content-encoding', encoding).send(body);
}
