import type { Principal } from '../auth/principal.js';
import { SERVICE_NAMESPACE } from '../changes/change-log.js';
import type { ContentReader } from '../content/content-reader.js';
import type { Db } from '../db/tables.js';
import { ForbiddenError, NotFoundError } from '../foundation/errors.js';
import { pageOf, readPage } from '../foundation/paging.js';
import { Answer, type LazyAnswer, type ReadAnswer, tagOf } from '../http/answer.js';
import type { PageMeta } from '../schemas/common.js';
import type {
  Catalog,
  CatalogParams,
  ListCatalogsQuery,
  ListResourcesQuery,
  ListVersionsQuery,
  ResourceDetail,
  ResourceListItem,
  ResourceVersionDetail,
  ResourceVersionSummary,
} from '../schemas/playbook.js';
import type { AnswerCache } from './answer-cache.js';
import { type Audience, answerKey, audienceOf, callerAudience } from './answer-keys.js';
import {
  parseFacets,
  toCatalog,
  toResourceDetail,
  toResourceListItem,
  toVersionDetail,
  toVersionSummary,
} from './mappers.js';
import * as repo from './read-repository.js';
import { planAllows } from './visibility.js';

/** The route's own response serializer for one shape (Fastify compiles it from the route's schema). */
export type Serialize<T> = (value: T) => string;

export interface PageOf<T> {
  readonly data: T[];
  readonly meta: PageMeta;
}

/**
 * The view of the Catalogs of an account (the Catalogs list mixes them with the service's, which
 * every account sees alike, so it is one account's view whatever the caller's plan). A caller with no
 * account selected sees the service's alone, under a caller view of its own.
 */
function accountView(principal: Principal): Audience {
  return principal.accountId === null
    ? callerAudience(principal)
    : { kind: 'account', accountId: principal.accountId };
}

/** The namespace of what `catalogAccountId` (null for the service) owns. */
function namespaceOf(catalogAccountId: string | null): string {
  return catalogAccountId ?? SERVICE_NAMESPACE;
}

/** What a list of Catalogs in `principal`'s view is made of: the service's, and its account's. */
function viewNamespaces(principal: Principal): string[] {
  return principal.accountId === null ? [SERVICE_NAMESPACE] : [SERVICE_NAMESPACE, principal.accountId];
}

/** A filter's values as one canonical text: the same set in any order and repetition is the same key. */
function setKey(values: readonly string[] | undefined): string {
  return [...new Set(values ?? [])].sort().join(',');
}

/**
 * The read side of the playbook area: what the four read operations and the history list answer.
 *
 * Each answer is kept in memory (`AnswerCache`) under a key that names the operation, its parameters
 * and the audience the answer is right for (`audienceOf`): the caller's account, or for service-owned
 * content every caller on the same plan. Scopes are checked before any of this, by the route. A miss
 * reads storage through the visibility rules, as for a first request, and keeps what it made with the
 * namespaces it is made of; a change in one of them drops it. So a hit answers exactly what a miss
 * would, and costs a lookup.
 */
export class PlaybookService {
  constructor(
    private readonly db: Db,
    private readonly content: ContentReader,
    private readonly answers: AnswerCache,
  ) {}

  listCatalogs(
    principal: Principal,
    query: ListCatalogsQuery,
    serialize: Serialize<PageOf<Catalog>>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const scopes = setKey(query.sourceScope);
    // Service-owned Catalogs are the same for every caller; an account's are its own.
    const audience: Audience | null = scopes === 'svc' ? null : accountView(principal);
    const { page, pageSize } = pageOf(query);
    const key = answerKey('catalogs', audience, scopes, query.capability ?? null, page, pageSize);
    return (
      this.answers.get(key) ??
      this.answers.once(key, async () => {
        const ticket = this.answers.ticket();
        const filters: repo.CatalogFilters = {
          sourceScopes: query.sourceScope,
          capability: query.capability,
        };
        const { rows, meta } = await readPage(
          query,
          () => repo.countCatalogs(this.db, principal, filters),
          (window) => repo.listCatalogs(this.db, principal, filters, window),
        );
        const data = rows.map((row) => toCatalog(row.catalog, row.currentVersion));
        const namespaces = scopes === 'svc' ? [SERVICE_NAMESPACE] : viewNamespaces(principal);
        return this.keep(key, Answer.json(serialize({ data, meta })), ticket, namespaces);
      })
    );
  }

  listResources(
    principal: Principal,
    params: CatalogParams,
    query: ListResourcesQuery,
    serialize: Serialize<PageOf<ResourceListItem>>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const audience: Audience | null = params.owner === 'svc' ? null : accountView(principal);
    const { page, pageSize } = pageOf(query);
    const key = answerKey('resources', audience, params.catalogSlug, setKey(query.kind), page, pageSize);
    return (
      this.answers.get(key) ??
      this.answers.once(key, async () => {
        const ticket = this.answers.ticket();
        const catalog = await repo.findCatalog(this.db, principal, params.owner, params.catalogSlug);
        if (!catalog) throw new NotFoundError(`catalog ${params.owner}/${params.catalogSlug} not found`);
        const kinds = query.kind ?? [];
        const listKey = answerKey('positions', null, catalog.id, setKey(kinds));
        const namespaces = [namespaceOf(catalog.account_id)];
        const positions =
          this.answers.positions(listKey) ??
          this.keepPositions(
            listKey,
            await repo.resourcePositions(this.db, catalog, kinds),
            ticket,
            namespaces,
          );
        const { rows, meta } = await readPage(query, positions.total, (window) =>
          repo.listResources(this.db, catalog, kinds, window, positions),
        );
        const answer = Answer.json(serialize({ data: rows.map(toResourceListItem), meta }));
        return this.keep(key, answer, ticket, namespaces);
      })
    );
  }

  getResource(
    principal: Principal,
    resourceId: string,
    serialize: Serialize<ResourceDetail>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const key = (audience: Audience) => answerKey('resource', audience, resourceId);
    return (
      this.heldFor(principal, key) ??
      this.answers.once(key(callerAudience(principal)), async () => {
        const ticket = this.answers.ticket();
        const row = await repo.findResource(this.db, principal, resourceId);
        if (!row) throw new NotFoundError(`resource ${resourceId} not found`);
        this.checkPlan(principal, row.catalogAccountId, row.resource.facets);
        const { content_hash, storage_backend } = row.currentVersion;
        const content = await this.content.read(storage_backend, content_hash);
        const answer = Answer.json(serialize(toResourceDetail(row, content)));
        const namespaces = [namespaceOf(row.catalogAccountId)];
        return this.keep(key(audienceOf(principal, row.catalogAccountId)), answer, ticket, namespaces);
      })
    );
  }

  listVersions(
    principal: Principal,
    resourceId: string,
    query: ListVersionsQuery,
    serialize: Serialize<PageOf<ResourceVersionSummary>>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const { page, pageSize } = pageOf(query);
    const key = (audience: Audience) => answerKey('versions', audience, resourceId, page, pageSize);
    return (
      this.heldFor(principal, key) ??
      this.answers.once(key(callerAudience(principal)), async () => {
        const ticket = this.answers.ticket();
        const gate = await this.gateResource(principal, resourceId);
        const { rows, meta } = await readPage(
          query,
          () => repo.countVersions(this.db, principal, resourceId),
          (window) => repo.listVersions(this.db, principal, resourceId, window),
        );
        const answer = Answer.json(serialize({ data: rows.map(toVersionSummary), meta }));
        const namespaces = [namespaceOf(gate.catalogAccountId)];
        return this.keep(key(audienceOf(principal, gate.catalogAccountId)), answer, ticket, namespaces);
      })
    );
  }

  /**
   * A Resource Version's answer is lazy: its validator comes from its row, which names its content by
   * hash, so a revalidation is answered without loading content (D11). Content is loaded, checked
   * (D12) and serialized when the answer is first sent, and kept with it.
   */
  getVersion(
    principal: Principal,
    resourceId: string,
    versionId: string,
    serialize: Serialize<ResourceVersionDetail>,
  ): ReadAnswer | Promise<ReadAnswer> {
    const key = (audience: Audience) => answerKey('version', audience, resourceId, versionId);
    return (
      this.heldFor(principal, key) ??
      this.answers.once(key(callerAudience(principal)), async () => {
        const ticket = this.answers.ticket();
        const found = await repo.findVersion(this.db, principal, resourceId, versionId);
        if (!found) {
          // In the order of the rules: the Resource not visible (404), its plan (403), the version (404).
          await this.gateResource(principal, resourceId);
          throw new NotFoundError(`version ${versionId} of resource ${resourceId} not found`);
        }
        const { version, gate } = found;
        this.checkPlan(principal, gate.catalogAccountId, gate.facets);
        const audienceKey = key(audienceOf(principal, gate.catalogAccountId));
        const namespaces = [namespaceOf(gate.catalogAccountId)];
        // Every field but the content, and the content's hash, which stands for it.
        const withoutContent = serialize(toVersionDetail(version, ''));
        const tag = tagOf(`${withoutContent}\n${version.content_hash}`);
        let loading: Promise<Answer> | undefined;
        const load = async () => {
          const content = await this.content.read(version.storage_backend, version.content_hash);
          const answer = Answer.json(serialize(toVersionDetail(version, content)), tag);
          return this.keep(audienceKey, answer, ticket, namespaces);
        };
        const lazy: LazyAnswer = {
          tag,
          // Content serializes to at least its UTF-8 bytes.
          minBytes: Buffer.byteLength(withoutContent) + Number(version.content_size_bytes),
          // One load for every request that holds this answer; a failed one is tried again by the next.
          load: () => {
            loading ??= load().catch((error: unknown) => {
              loading = undefined;
              throw error;
            });
            return loading;
          },
        };
        return this.keep(audienceKey, lazy, ticket, namespaces);
      })
    );
  }

  /** The answer held for what `principal` may see: the service's, for its plan, or its account's. */
  private heldFor(principal: Principal, key: (audience: Audience) => string): ReadAnswer | undefined {
    return (
      this.answers.get(key(audienceOf(principal, null))) ??
      (principal.accountId === null
        ? undefined
        : this.answers.get(key(audienceOf(principal, principal.accountId))))
    );
  }

  private keepPositions(
    key: string,
    positions: repo.ListPositions,
    ticket: number,
    namespaces: readonly string[],
  ): repo.ListPositions {
    this.answers.keepPositions(key, positions, ticket, namespaces);
    return positions;
  }

  private keep<A extends ReadAnswer>(
    key: string,
    answer: A,
    ticket: number,
    namespaces: readonly string[],
  ): A {
    this.answers.set(key, answer, ticket, namespaces);
    return answer;
  }

  /** Visibility, then plan: a version is looked at only once its Resource may be. */
  private async gateResource(principal: Principal, resourceId: string): Promise<repo.ResourceGate> {
    const gate = await repo.findResourceGate(this.db, principal, resourceId);
    if (!gate) throw new NotFoundError(`resource ${resourceId} not found`);
    this.checkPlan(principal, gate.catalogAccountId, gate.facets);
    return gate;
  }

  private checkPlan(principal: Principal, catalogAccountId: string | null, facets: string | null): void {
    if (!planAllows(principal, catalogAccountId === null, parseFacets(facets))) {
      throw new ForbiddenError('this resource needs a plan the account does not have', 'plan_required');
    }
  }
}
