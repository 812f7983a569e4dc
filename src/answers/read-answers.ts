import type { Principal } from '../auth/principal.js';
import { type Audience, audienceOf, callerAudience, type Seen } from '../catalog/audience.js';
import type {
  PageOf,
  PinsInStorage,
  PlaybookService,
  PositionsMemo,
  VersionRead,
} from '../catalog/playbook-service.js';
import type { PinsReading } from '../catalog/stored-pins.js';
import { catalogRefAdmitted } from '../catalog/visibility.js';
import { NotFoundError } from '../foundation/errors.js';
import { pageOf } from '../foundation/paging.js';
import { Answer, type LazyAnswer, type ReadAnswer, tagOf } from '../http/answer.js';
import { BLOCK_BYTES, blocksOf, compressLikeStream, StreamedAnswer } from '../http/streamed-answer.js';
import type {
  Catalog,
  CatalogParams,
  ListCatalogsQuery,
  ListResourcesQuery,
  ListVersionsQuery,
  ResourceDetail,
  ResourceListItem,
  ResourceRefParams,
  ResourceVersionDetail,
  ResourceVersionSummary,
} from '../schemas/playbook.js';
import type { AnswerCache } from './answer-cache.js';
import { type AnswerKey, answerKey, setKey } from './answer-keys.js';

/** What a pin takes in the list's text, about: its size decides whether a page is held whole. */
const PIN_BYTES = 220;
/**
 * A page smaller than this is made whole even when it will not be kept (a budget of 0): it costs
 * little, and is compressed only from 1 KiB (D19), which a body written as it is read cannot know.
 */
const STREAMED_FROM_BYTES = 256 * 1024;
/** Where a current version's pins go in the text of a page written with none. */
const EMPTY_PINS = '"resourcePins":[]';
const PINS_NAME = '"resourcePins":';

/**
 * The text of Catalogs (a page, or one) cut where each current version's pins go, in order: `count`
 * places, `count + 1` pieces. Facets have known keys and strings escape their quotes, so the name appears
 * nowhere else in the text.
 */
function piecesAround(text: string, count: number): string[] {
  const pieces: string[] = [];
  let from = 0;
  for (let i = 0; i < count; i++) {
    const at = text.indexOf(EMPTY_PINS, from);
    if (at < 0) throw new Error('a current version of the answer has no pins in its text');
    pieces.push(text.slice(from, at + PINS_NAME.length));
    from = at + EMPTY_PINS.length;
  }
  if (text.indexOf(EMPTY_PINS, from) >= 0) throw new Error('the answer has pins of no current version');
  pieces.push(text.slice(from));
  return pieces;
}

/** An answer's text with each version's stored pins in their place, as the pins are read. */
async function* pinnedText(
  pieces: readonly string[],
  pins: PinsInStorage,
  reading: PinsReading,
): AsyncGenerator<string> {
  const pinsOf = pins.readPins(reading);
  for (const [index, versionId] of pins.versionIds.entries()) {
    yield pieces[index]!;
    yield* pinsOf(versionId);
  }
  yield pieces.at(-1)!;
}

/** The keys of what is read of one Resource, by the audience whose view it is. */
type ResourceKeyOf = (audience: Audience | null) => AnswerKey;

const resourceKey =
  (resourceId: string): ResourceKeyOf =>
  (audience) =>
    answerKey('resource', audience, resourceId);

function versionsKey(resourceId: string, query: ListVersionsQuery): ResourceKeyOf {
  const { page, pageSize } = pageOf(query);
  return (audience) => answerKey('versions', audience, resourceId, page, pageSize);
}

const versionKey =
  (resourceId: string, versionId: string): ResourceKeyOf =>
  (audience) =>
    answerKey('version', audience, resourceId, versionId);

/** A read operation and what names its answer, as the routes validate them (ids lowercase). */
export type HeldRead =
  | { readonly operation: 'listPlaybookCatalogs'; readonly query: ListCatalogsQuery }
  | {
      readonly operation: 'listPlaybookCatalogResources';
      readonly params: CatalogParams;
      readonly query: ListResourcesQuery;
    }
  | { readonly operation: 'getPlaybookCatalog'; readonly params: CatalogParams }
  | { readonly operation: 'getPlaybookResourceByRef'; readonly params: ResourceRefParams }
  | { readonly operation: 'getPlaybookResource'; readonly resourceId: string }
  | {
      readonly operation: 'listPlaybookResourceVersions';
      readonly resourceId: string;
      readonly query: ListVersionsQuery;
    }
  | {
      readonly operation: 'getPlaybookResourceVersion';
      readonly resourceId: string;
      readonly versionId: string;
    };

/** The 404 of a Catalog named by its human ref that the caller does not see (D5, D32). */
function catalogNotFound(params: CatalogParams): Promise<never> {
  return Promise.reject(new NotFoundError(`catalog ${params.owner}/${params.catalogSlug} not found`));
}

/** The route's own response serializer for one shape (Fastify compiles it from the route's schema). */
export type Serialize<T> = (value: T) => string;

/**
 * The read operations' answers as the edge keeps them: what the read side (`PlaybookService`) sees,
 * serialized by the route's schema, kept in memory (`AnswerCache`) under the one key scheme
 * (answer-keys.ts) for the audience the read side names, and sent by `sendAnswer`.
 *
 * A hit costs a lookup and answers exactly what a miss would: a miss asks the read side, as a first
 * request does, and keeps the answer with the namespaces it is made of, whose changes drop it. An answer
 * made from reads that began before a drop of one of its namespaces is never kept (the cache's ticket,
 * taken before reading). Concurrent requests for an answer not held yet wait for one read.
 */
export class ReadAnswers {
  constructor(
    private readonly reads: PlaybookService,
    private readonly answers: AnswerCache,
    /** Told of a Resource whose stored detail is not of the current form (D30). */
    private readonly missingDetail: (resourceId: string) => void = () => {},
  ) {}

  listCatalogs(
    principal: Principal,
    query: ListCatalogsQuery,
    serialize: Serialize<PageOf<Catalog>>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const key = this.catalogsKey(principal, query);
    return (
      this.answers.get(key) ??
      this.answers.once(key, async () => {
        const ticket = this.answers.ticket();
        const seen = await this.reads.catalogsPage(principal, query);
        const { page: value, ...pins } = seen.value;
        // Its validator is the text's digest: it names every current version by id, and a version's
        // pins never change.
        return this.keep(key, await this.pinnedAnswer(value, pins, serialize), ticket, seen.namespaces);
      })
    );
  }

  /**
   * The answer of Catalogs (a page of them, or one), written from their text with their pins left
   * empty and each current version's pins read into it where they belong, validated by `tag` (the
   * text's digest unless given). An answer that fits a share of the budget is made whole and kept as
   * any answer is; a larger one (a Catalog of 100,000 Resources pins 20 MB) is written as it is read
   * for each request, never held whole (D30).
   */
  private async pinnedAnswer<T>(
    value: T,
    pins: PinsInStorage,
    serialize: Serialize<T>,
    given?: string,
  ): Promise<Answer | StreamedAnswer> {
    const text = serialize(value);
    const tag = given ?? tagOf(text);
    const pieces = piecesAround(text, pins.versionIds.length);
    const size = Buffer.byteLength(text) + pins.pinCount * PIN_BYTES;
    if (size > Math.max(this.answers.share, STREAMED_FROM_BYTES)) {
      // Read as the stream takes them: a part per statement for the identity body's blocks (64 KiB),
      // a statement per sixteen parts for the compressor's runs (1 MiB, about sixteen parts): either
      // way none waits across the event loop's turns, and on PostgreSQL, where each statement is a
      // round trip and a turn, a compressed list of 400 parts costs 25 of them.
      return new StreamedAnswer(tag, text.length * 2, (blockBytes) =>
        blocksOf(pinnedText(pieces, pins, blockBytes > BLOCK_BYTES ? 'batches' : 'parts'), blockBytes),
      );
    }
    const blocks: Buffer[] = [];
    for await (const block of blocksOf(pinnedText(pieces, pins, 'batches'))) blocks.push(block);
    return new Answer(Buffer.concat(blocks), tag, compressLikeStream);
  }

  listResources(
    principal: Principal,
    params: CatalogParams,
    query: ListResourcesQuery,
    serialize: Serialize<PageOf<ResourceListItem>>,
  ): ReadAnswer | Promise<ReadAnswer> {
    if (!catalogRefAdmitted(principal, params.owner, params.catalogSlug)) return catalogNotFound(params);
    const key = this.resourcesKey(principal, params, query);
    return (
      this.answers.get(key) ??
      this.load(
        key,
        (ticket) => this.reads.listResources(principal, params, query, this.memo(ticket)),
        serialize,
      )
    );
  }

  /**
   * One Catalog by its human ref (D29), held as the list of its Resources is, by its owner's view, and
   * written as the list is: its pins read into it as it is sent when they are many (D30). It is
   * validated by the Catalog's version tag, which its write's If-Match takes.
   */
  getCatalog(
    principal: Principal,
    params: CatalogParams,
    serialize: Serialize<Catalog>,
  ): ReadAnswer | Promise<ReadAnswer> {
    if (!catalogRefAdmitted(principal, params.owner, params.catalogSlug)) return catalogNotFound(params);
    const key = this.catalogKey(principal, params);
    return (
      this.answers.get(key) ??
      this.answers.once(key, async () => {
        const ticket = this.answers.ticket();
        const seen = await this.reads.getCatalog(principal, params);
        const { catalog, ...pins } = seen.value;
        const answer = await this.pinnedAnswer(catalog, pins, serialize, seen.tag);
        return this.keep(key, answer, ticket, seen.namespaces);
      })
    );
  }

  /**
   * One Resource by its human ref (D29). Whose it is and so its audience are known from the ref: one
   * key, looked up once, where a read by id must try the service's and then the account's.
   */
  getResourceByRef(
    principal: Principal,
    params: ResourceRefParams,
    serialize: Serialize<ResourceDetail>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const { owner, catalogSlug, resourceSlug } = params;
    if (!catalogRefAdmitted(principal, owner, catalogSlug)) {
      return Promise.reject(new NotFoundError(`resource ${owner}/${catalogSlug}/${resourceSlug} not found`));
    }
    const key = this.resourceByRefKey(principal, params);
    return (
      this.answers.get(key) ?? this.load(key, () => this.reads.getResourceByRef(principal, params), serialize)
    );
  }

  getResource(
    principal: Principal,
    resourceId: string,
    serialize: Serialize<ResourceDetail>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const admitted = principal.restrictions?.catalogs ? this.admitted(principal, resourceId) : true;
    if (admitted !== true) return admitted.then(() => this.getResource(principal, resourceId, serialize));
    const key = resourceKey(resourceId);
    return (
      this.heldFor(principal, key) ??
      this.answers.once(key(callerAudience(principal)), async () => {
        const ticket = this.answers.ticket();
        // The read model first (D30): one search, and the text as it is sent.
        const stored = await this.reads.storedResource(principal, resourceId, this.missingDetail);
        if (stored) {
          const answer = Answer.json(stored.value.text, stored.tag);
          return this.keep(key(stored.audience), answer, ticket, stored.namespaces);
        }
        const seen = await this.reads.getResource(principal, resourceId);
        return this.keep(
          key(seen.audience),
          Answer.json(serialize(seen.value), seen.tag),
          ticket,
          seen.namespaces,
        );
      })
    );
  }

  listVersions(
    principal: Principal,
    resourceId: string,
    query: ListVersionsQuery,
    serialize: Serialize<PageOf<ResourceVersionSummary>>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const admitted = principal.restrictions?.catalogs ? this.admitted(principal, resourceId) : true;
    if (admitted !== true) {
      return admitted.then(() => this.listVersions(principal, resourceId, query, serialize));
    }
    const key = versionsKey(resourceId, query);
    return (
      this.heldFor(principal, key) ??
      this.load(
        key(callerAudience(principal)),
        () => this.reads.listVersions(principal, resourceId, query),
        serialize,
        key,
      )
    );
  }

  /**
   * A Resource Version's answer is lazy: its validator comes from every field but the content, and the
   * content's hash, which stands for it, so a revalidation is answered without loading content (D11).
   * Content is loaded, checked (D12) and serialized when the answer is first sent, and kept with it.
   */
  getVersion(
    principal: Principal,
    resourceId: string,
    versionId: string,
    serialize: Serialize<ResourceVersionDetail>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const admitted = principal.restrictions?.catalogs ? this.admitted(principal, resourceId) : true;
    if (admitted !== true) {
      return admitted.then(() => this.getVersion(principal, resourceId, versionId, serialize));
    }
    const key = versionKey(resourceId, versionId);
    return (
      this.heldFor(principal, key) ??
      this.answers.once(key(callerAudience(principal)), async () => {
        const ticket = this.answers.ticket();
        const seen = await this.reads.getVersion(principal, resourceId, versionId);
        const lazy = this.lazyVersion(seen, serialize, (answer) =>
          this.keep(key(seen.audience), answer, ticket, seen.namespaces),
        );
        return this.keep(key(seen.audience), lazy, ticket, seen.namespaces);
      })
    );
  }

  /**
   * The answer `read` would be sent now, when memory holds it whole: what the fast path sends
   * (routes/memory-reads.ts) without asking the read side. Anything else (an answer not held, one
   * whose body is loaded or written as it is read) is `undefined`, for the route to answer as usual.
   * The keys are the ones the reads above keep their answers under.
   */
  held(principal: Principal, read: HeldRead): Answer | undefined {
    // D32: what a key restricted to some Catalogs may not see is refused the usual way, which says so.
    if (principal.restrictions?.catalogs && !this.admittedNow(principal, read)) return undefined;
    switch (read.operation) {
      case 'listPlaybookCatalogs':
        return this.answers.held(this.catalogsKey(principal, read.query));
      case 'listPlaybookCatalogResources':
        return this.answers.held(this.resourcesKey(principal, read.params, read.query));
      case 'getPlaybookCatalog':
        return this.answers.held(this.catalogKey(principal, read.params));
      case 'getPlaybookResourceByRef':
        return this.answers.held(this.resourceByRefKey(principal, read.params));
      case 'getPlaybookResource':
        return this.heldWhole(principal, resourceKey(read.resourceId));
      case 'listPlaybookResourceVersions':
        return this.heldWhole(principal, versionsKey(read.resourceId, read.query));
      case 'getPlaybookResourceVersion':
        return this.heldWhole(principal, versionKey(read.resourceId, read.versionId));
    }
  }

  /**
   * A Resource's detail read at once from the read model, when memory does not hold it and the
   * database can search without a promise (SQLite): kept as `getResource` keeps it, and sent at once.
   * Undefined when it cannot be read so; a refusal (the plan gate) is thrown as `getResource` throws it.
   */
  detailNow(principal: Principal, resourceId: string): Answer | undefined {
    if (principal.restrictions?.catalogs && this.reads.admitsResource(principal, resourceId) !== true) {
      return undefined;
    }
    const ticket = this.answers.ticket();
    const stored = this.reads.storedResourceNow(principal, resourceId, this.missingDetail);
    if (!stored) return undefined;
    this.answers.missed();
    const answer = Answer.json(stored.value.text, stored.tag);
    return this.keep(resourceKey(resourceId)(stored.audience), answer, ticket, stored.namespaces);
  }

  /** Whether a restricted key's catalogs admit what `read` names, as far as memory tells at once. */
  private admittedNow(principal: Principal, read: HeldRead): boolean {
    switch (read.operation) {
      case 'listPlaybookCatalogs':
        return true;
      case 'listPlaybookCatalogResources':
      case 'getPlaybookCatalog':
      case 'getPlaybookResourceByRef':
        return catalogRefAdmitted(principal, read.params.owner, read.params.catalogSlug);
      default:
        return this.reads.admitsResource(principal, read.resourceId) === true;
    }
  }

  private catalogsKey(principal: Principal, query: ListCatalogsQuery): AnswerKey {
    const { page, pageSize } = pageOf(query);
    const audience = this.reads.catalogsAudience(principal, query);
    return answerKey(
      'catalogs',
      audience,
      setKey(query.sourceScope),
      query.capability ?? null,
      page,
      pageSize,
    );
  }

  private resourcesKey(principal: Principal, params: CatalogParams, query: ListResourcesQuery): AnswerKey {
    const { page, pageSize } = pageOf(query);
    const audience = this.reads.resourcesAudience(principal, params);
    return answerKey('resources', audience, params.catalogSlug, setKey(query.kind), page, pageSize);
  }

  private catalogKey(principal: Principal, params: CatalogParams): AnswerKey {
    return answerKey('catalog', this.reads.catalogAudience(principal, params), params.catalogSlug);
  }

  private resourceByRefKey(principal: Principal, params: ResourceRefParams): AnswerKey {
    const audience = this.reads.resourceRefAudience(principal, params);
    return answerKey('resourceByRef', audience, params.catalogSlug, params.resourceSlug);
  }

  /** `heldFor`, when what is held is an answer whole. */
  private heldWhole(principal: Principal, key: (audience: Audience | null) => AnswerKey): Answer | undefined {
    const held = this.answers.held(key(audienceOf(principal, null)));
    if (held !== undefined || principal.accountId === null) return held;
    return this.answers.held(key(audienceOf(principal, principal.accountId)));
  }

  /**
   * D32: `true` when `principal`'s key admits the Catalog of the Resource `resourceId` as far as memory
   * tells; else a promise that settles once storage has told, rejected with the 404 of a Resource that
   * does not exist when it does not admit it. A Resource's answers are shared by everyone who may see
   * it, so they are looked up only once the Catalog is admitted.
   */
  private admitted(principal: Principal, resourceId: string): true | Promise<void> {
    const admits = this.reads.admitsResource(principal, resourceId);
    if (admits === true) return true;
    const refuse = () => Promise.reject(new NotFoundError(`resource ${resourceId} not found`));
    return admits === false ? refuse() : admits.then((yes) => (yes ? undefined : refuse()));
  }

  /**
   * The answer held for what `principal` may see of one Resource: the service's for its plan, or its
   * account's. The second key is made only when the first misses (the hot path of a busy service).
   */
  private heldFor(principal: Principal, key: ResourceKeyOf): ReadAnswer | undefined {
    const held = this.answers.get(key(audienceOf(principal, null)));
    if (held !== undefined || principal.accountId === null) return held;
    return this.answers.get(key(audienceOf(principal, principal.accountId)));
  }

  /**
   * Reads and serializes an answer not held, once for every request that waits for it under
   * `loadKey`, and keeps it under the key of the audience the read names (`keyFor`, when it is not
   * known before the read).
   */
  private load<T>(
    loadKey: AnswerKey,
    read: (ticket: number) => Promise<Seen<T>>,
    serialize: Serialize<T>,
    keyFor?: (audience: Audience | null) => AnswerKey,
  ): Promise<ReadAnswer> {
    return this.answers.once(loadKey, async () => {
      const ticket = this.answers.ticket();
      const seen = await read(ticket);
      const key = keyFor ? keyFor(seen.audience) : loadKey;
      // One object's answer is validated by its version tag, so that its ETag names it to a write (D29).
      return this.keep(key, Answer.json(serialize(seen.value), seen.tag), ticket, seen.namespaces);
    });
  }

  private lazyVersion(
    seen: Seen<VersionRead>,
    serialize: Serialize<ResourceVersionDetail>,
    keep: (answer: Answer) => Answer,
  ): LazyAnswer {
    const { withoutContent, content } = seen.value;
    const withoutContentText = serialize(withoutContent);
    const tag = tagOf(`${withoutContentText}\n${withoutContent.contentHash}`);
    let loading: Promise<Answer> | undefined;
    return {
      tag,
      // Content serializes to at least its UTF-8 bytes.
      minBytes: Buffer.byteLength(withoutContentText) + withoutContent.contentSizeBytes,
      // One load for every request that holds this answer; a failed one is tried again by the next.
      load: () => {
        loading ??= content()
          .then((text) => keep(Answer.json(serialize({ ...withoutContent, content: text }), tag)))
          .catch((error: unknown) => {
            loading = undefined;
            throw error;
          });
        return loading;
      },
    };
  }

  /** The positions of lists of Resources, kept beside the answers under the same ticket. */
  private memo(ticket: number): PositionsMemo {
    const key = (catalogId: string, kinds: readonly string[]) =>
      answerKey('positions', null, catalogId, setKey(kinds));
    return {
      held: (catalogId, kinds) => this.answers.positions(key(catalogId, kinds)),
      keep: (catalogId, kinds, positions, namespaces) =>
        this.answers.keepPositions(key(catalogId, kinds), positions, ticket, namespaces),
    };
  }

  private keep<A extends ReadAnswer>(
    key: AnswerKey,
    answer: A,
    ticket: number,
    namespaces: readonly string[],
  ): A {
    this.answers.set(key, answer, ticket, namespaces);
    return answer;
  }
}
