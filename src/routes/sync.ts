import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import type { PinsReading } from '../catalog/stored-pins.js';
import { growingCache } from '../foundation/growing-cache.js';
import { Answer, sendAnswer, tagOf } from '../http/answer.js';
import { BLOCK_BYTES, blocksOf, StreamedAnswer } from '../http/streamed-answer.js';
import { notModifiedResponse, problemResponses } from '../schemas/common.js';
import {
  type SyncCatalogItem,
  SyncCatalogItem as SyncCatalogItemSchema,
  SyncPage,
  SyncQuery,
  type SyncRemovedItem,
  SyncRemovedItem as SyncRemovedItemSchema,
  type SyncResourceItem,
  SyncResourceItem as SyncResourceItemSchema,
} from '../schemas/sync.js';
import type { FeedItem, PinsRef, PinsSource } from '../sync/feed-items.js';
import type { SyncAnswer, SyncFeed } from '../sync/sync-feed.js';
import { principalOf, READ, security } from './playbook.js';

const EMPTY_PINS = '"resourcePins":[]';
const PINS_NAME = '"resourcePins":';
/** What a pin takes in a page's text, about: its size decides whether a page is held whole. */
const PIN_BYTES = 220;
/** A page larger than this is written as it is read, a stream per request (D30). */
const STREAMED_FROM_BYTES = 256 * 1024;

/** Serializers of each kind of item, compiled once by Fastify from their schemas. */
interface ItemSerializers {
  readonly catalog: (item: SyncCatalogItem) => string;
  readonly resource: (item: SyncResourceItem) => string;
  readonly removed: (item: SyncRemovedItem) => string;
}

/**
 * A page as JSON text cut where each Catalog's pins go: `pins.length + 1` pieces, each item by the
 * serializer of its own kind. The page's schema is a union of the three, which a serializer resolves
 * by validating each item against each kind (a Catalog with 100,000 pins, several times over); the
 * item's `type` already says which it is.
 */
function pageText(answer: SyncAnswer, serializers: ItemSerializers): { pieces: string[]; pins: PinsRef[] } {
  const pieces: string[] = [];
  const pins: PinsRef[] = [];
  let text = '{"data":[';
  answer.data.forEach((item: FeedItem, index) => {
    if (index > 0) text += ',';
    if (item.type === 'resource') text += serializers.resource(item);
    else if (item.type === 'removed') text += serializers.removed(item);
    else {
      const written = serializers.catalog({ type: item.type, catalog: item.catalog });
      if (item.pins === undefined) {
        text += written;
        return;
      }
      // Quotes inside strings are escaped: this is the property, and the only one of that name.
      const at = written.indexOf(EMPTY_PINS);
      if (at === -1) throw new Error('a Catalog serialized without its resourcePins');
      pieces.push(text + written.slice(0, at) + PINS_NAME);
      pins.push(item.pins);
      text = written.slice(at + EMPTY_PINS.length);
    }
  });
  const position =
    answer.nextPageToken !== undefined
      ? `"nextPageToken":${JSON.stringify(answer.nextPageToken)}`
      : `"nextSyncToken":${JSON.stringify(answer.nextSyncToken)}`;
  pieces.push(`${text}],${position}}`);
  return { pieces, pins };
}

/** A page's text with each Catalog's stored pins in its place, as they are read. */
async function* pinnedPage(
  pieces: readonly string[],
  pins: readonly PinsRef[],
  source: PinsSource,
  reading: PinsReading,
): AsyncGenerator<string> {
  for (const [index, ref] of pins.entries()) {
    yield pieces[index]!;
    yield* source(ref.versionId, reading);
  }
  yield pieces.at(-1)!;
}

/**
 * A page's answer: held whole when it is small (its validator the digest of its bytes), written as it
 * is read for each request when its Catalogs pin many Resources (its validator the digest of its text
 * with the pins left out, which names each Catalog's current version, whose pins never change, D30).
 */
async function pageAnswer(
  answer: SyncAnswer,
  serializers: ItemSerializers,
  source: PinsSource,
): Promise<Answer | StreamedAnswer> {
  const { pieces, pins } = pageText(answer, serializers);
  if (pins.length === 0) return Answer.jsonOf(pieces);
  let size = 0;
  for (const piece of pieces) size += piece.length;
  for (const ref of pins) size += ref.count * PIN_BYTES;
  if (size > STREAMED_FROM_BYTES) {
    const tag = tagOf(pieces.join(''));
    return new StreamedAnswer(tag, size, (blockBytes) =>
      blocksOf(pinnedPage(pieces, pins, source, blockBytes > BLOCK_BYTES ? 'batches' : 'parts'), blockBytes),
    );
  }
  const blocks: Buffer[] = [];
  for await (const block of blocksOf(pinnedPage(pieces, pins, source, 'batches'))) blocks.push(block);
  return new Answer(Buffer.concat(blocks));
}

function serializersOf(reply: FastifyReply): ItemSerializers {
  return {
    catalog: reply.compileSerializationSchema(SyncCatalogItemSchema) as ItemSerializers['catalog'],
    resource: reply.compileSerializationSchema(SyncResourceItemSchema) as ItemSerializers['resource'],
    removed: reply.compileSerializationSchema(SyncRemovedItemSchema) as ItemSerializers['removed'],
  };
}

/**
 * Answers of empty pages by their position, made once: a follower that polls without `wait` asks
 * again and again at the same position, and the answer's bytes and validator depend on nothing else.
 */
const EMPTY_KEPT = 10_000;

/**
 * `GET /v3/playbook/sync` (D27): an initial sync, then what changed, with requests held until
 * something does. A held request whose client goes away is let go at once.
 */
export function syncRoutes(feed: SyncFeed): FastifyPluginAsyncTypebox {
  const empties = growingCache<string, Answer>(EMPTY_KEPT);
  /** Answers made for pages that several requests share (those woken by one change read one page). */
  const made = new WeakMap<SyncAnswer, Promise<Answer | StreamedAnswer>>();
  /** A page's answer, made once per page, and an empty one once per position. */
  const answerOf = (answer: SyncAnswer, reply: FastifyReply): Answer | Promise<Answer | StreamedAnswer> => {
    const token = answer.nextSyncToken;
    if (answer.data.length === 0 && token !== undefined) {
      const kept = empties.get(token);
      if (kept) return kept;
      const fresh = Answer.jsonOf(pageText(answer, serializersOf(reply)).pieces);
      empties.set(token, fresh);
      return fresh;
    }
    let making = made.get(answer);
    if (!making) {
      making = pageAnswer(answer, serializersOf(reply), feed.pins);
      made.set(answer, making);
    }
    return making;
  };
  return async (app) => {
    app.route({
      // HEAD answers as GET does, held the same way, without the body (D11).
      method: ['GET', 'HEAD'],
      url: '/v3/playbook/sync',
      config: READ,
      schema: {
        operationId: 'syncPlaybook',
        summary: 'Follow every Catalog and Resource the caller can see: an initial sync, then changes',
        description:
          'Without syncToken: an initial sync, pages of every Catalog (as the Catalogs list shows them, pins included) and every Resource (as list items) the caller can see. ' +
          'Follow nextPageToken (as pageToken) until a page gives nextSyncToken; keep that, and ask later with syncToken for what changed since: each Catalog or Resource once, as it is now, in the order of its last change, or {type: "removed"} when the caller can no longer see it (a removed Catalog takes its Resources with it). ' +
          'With wait, a request that finds nothing changed is held until something does (answered within a second of the change) or answered empty at the end of the wait. ' +
          'Held requests are shared: one credential (an API key, or a user’s access tokens) holds at most 20 at once on an instance by default, and one account at most a tenth of the instance’s room (never under 20), whichever of its credentials hold them; past its share a request is answered at once 429 rate_limited with Retry-After, and past the instance’s limit of held requests, 503 with Retry-After. ' +
          'Before a held request answers, its credential is checked again: a key revoked, rolled past its overlap or expired while the request was held, or an access token expired meanwhile, is answered 401 as a new request with it would be, never with what changed. ' +
          'A token is opaque and works for the caller it was made for: another account’s, a damaged one, or a page token given as syncToken is 400 invalid_sync_token; one older than the change log keeps, or made before the account’s plan or the API key’s restrictions changed, is 410 sync_token_expired, and the follower starts again with an initial sync.',
        tags: ['playbook'],
        security,
        querystring: SyncQuery,
        response: {
          200: Type.Ref(SyncPage, { description: 'One page of the sync, and the position to go on from' }),
          ...notModifiedResponse,
          ...problemResponses(400, 401, 403, 410, 429, 500, 503),
        },
      },
      handler: (request, reply) => {
        const principal = principalOf(request);
        const answer = feed.readFromMemory(principal, request.query);
        if (answer) return sendAnswer(request, reply, answerOf(answer, reply));
        let signal: AbortSignal | undefined;
        if ((request.query.wait ?? 0) > 0) {
          // The answer's connection closing before the answer is sent: the client went away.
          const gone = new AbortController();
          reply.raw.once('close', () => {
            if (!reply.raw.writableFinished) gone.abort();
          });
          signal = gone.signal;
        }
        return feed
          .read(principal, request.query, signal)
          .then((read) => sendAnswer(request, reply, answerOf(read, reply)));
      },
    });
  };
}
