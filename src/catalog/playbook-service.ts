import type { Principal } from '../auth/principal.js';
import type { ContentReader } from '../content/content-reader.js';
import { canonicalJson, sha256Hex } from '../content/hash.js';
import type { Db, ResourceVersionRow } from '../db/tables.js';
import { ForbiddenError, NotFoundError } from '../errors.js';
import { DEFAULT_PAGE_SIZE, type PageMeta } from '../schemas/common.js';
import type {
  CatalogParams,
  ListCatalogsQuery,
  ListResourcesQuery,
  ListVersionsQuery,
  ResourceVersionDetail,
  ResourceVersionSummary,
  StorageBackend,
} from '../schemas/playbook.js';
import { AnswerBodies, type SerializedAnswer } from './answer-bodies.js';
import {
  type CatalogVersionColumns,
  catalogVersionColumnsOf,
  parseFacets,
  toCatalogHead,
  toCatalogVersion,
  toResourceDetail,
  toResourceListItem,
  toVersionDetail,
  toVersionSummary,
} from './mappers.js';
import * as repo from './read-repository.js';
import { rowState, type SerializedJson, SerializedRows } from './serialized-rows.js';
import {
  catalogOf,
  serializeCatalogHead,
  serializeCatalogVersion,
  serializedPage,
  serializeResourceDetail,
  serializeResourceListItem,
} from './serializers.js';
import { planAllows } from './visibility.js';

export interface PageOf<T> {
  readonly data: T[];
  readonly meta: PageMeta;
}

interface PageRequest {
  readonly page?: number;
  readonly pageSize?: number;
}

/** Counts first, so that a page past the end costs no second query (D3). */
async function readPage<R>(
  request: PageRequest,
  count: () => Promise<number>,
  fetch: (window: repo.PageWindow) => Promise<R[]>,
): Promise<{ rows: R[]; meta: PageMeta }> {
  const page = request.page ?? 1;
  const pageSize = request.pageSize ?? DEFAULT_PAGE_SIZE;
  const total = await count();
  const offset = (page - 1) * pageSize;
  const rows = offset < total ? await fetch({ offset, limit: pageSize }) : [];
  return { rows, meta: { page, pageSize, pageCount: Math.ceil(total / pageSize), total } };
}

/** A Resource Version without its content yet, and the strong validator of its full answer (D11). */
export interface VersionHandle {
  readonly row: ResourceVersionRow;
  readonly etag: string;
}

/**
 * Bounds of the caches of serialized JSON, in bytes (estimated: two a character). Every entry is
 * checked against the row it was made from on each use, so the bounds trade memory for speed only.
 */
export interface ReadCacheLimits {
  /** Catalog heads and Resource list items. */
  readonly listItemBytes?: number;
  /** Catalog versions with their pins, the bulk of a Catalog list. */
  readonly catalogVersionBytes?: number;
  /** Resource details, content included. */
  readonly detailBytes?: number;
  /** Whole list pages, by digest. */
  readonly pageBytes?: number;
}

const DEFAULT_LIST_ITEM_BYTES = 32 * 1024 * 1024;
const DEFAULT_CATALOG_VERSION_BYTES = 32 * 1024 * 1024;
const DEFAULT_DETAIL_BYTES = 32 * 1024 * 1024;
const DEFAULT_PAGE_BYTES = 32 * 1024 * 1024;

/**
 * The read side of the playbook area: what the four read operations and the history list answer.
 *
 * The two lists and the Resource detail answer JSON assembled from cached serialized parts (see
 * `SerializedRows`). Every request still runs its queries, so visibility (D5) and plans (D6) are
 * decided afresh each time, and every cached part is used only for the very state of the row it was
 * made from; what a row that did not change saves is parsing, serializing and hashing it again. The
 * pins of a catalog version, which never change, are the one thing trusted by id: they are read once.
 */
export class PlaybookService {
  private readonly catalogHeads: SerializedRows;
  private readonly catalogVersions: SerializedRows;
  private readonly resourceItems: SerializedRows;
  private readonly resourceDetails: SerializedRows;
  private readonly answers: AnswerBodies;

  constructor(
    private readonly db: Db,
    private readonly content: ContentReader,
    limits: ReadCacheLimits = {},
  ) {
    const listItemBytes = limits.listItemBytes ?? DEFAULT_LIST_ITEM_BYTES;
    this.catalogHeads = new SerializedRows({ maxBytes: listItemBytes });
    this.resourceItems = new SerializedRows({ maxBytes: listItemBytes });
    this.catalogVersions = new SerializedRows({
      maxBytes: limits.catalogVersionBytes ?? DEFAULT_CATALOG_VERSION_BYTES,
    });
    this.resourceDetails = new SerializedRows({ maxBytes: limits.detailBytes ?? DEFAULT_DETAIL_BYTES });
    this.answers = new AnswerBodies(limits.pageBytes ?? DEFAULT_PAGE_BYTES);
  }

  /** Entries and estimated bytes of each cache, for tests and operators. */
  get cacheStats() {
    return {
      catalogHeads: this.catalogHeads.stats,
      catalogVersions: this.catalogVersions.stats,
      resourceItems: this.resourceItems.stats,
      resourceDetails: this.resourceDetails.stats,
      pages: this.answers.stats,
    };
  }

  async listCatalogs(principal: Principal, query: ListCatalogsQuery): Promise<SerializedAnswer> {
    const filters: repo.CatalogFilters = { sourceScopes: query.sourceScope, capability: query.capability };
    const { rows, meta } = await readPage(
      query,
      () => repo.countCatalogs(this.db, principal, filters),
      (window) => repo.listCatalogs(this.db, principal, filters, window),
    );
    const versions = await this.serializedCatalogVersions(rows);
    const items = rows.map((row) => {
      const head = this.catalogHeads.get(row.id, rowState(row), () =>
        serializeCatalogHead(toCatalogHead(row)),
      );
      return catalogOf(head, row.cv_id === null ? undefined : versions.get(row.cv_id));
    });
    return this.answers.answerOf(serializedPage(items, meta));
  }

  /**
   * The serialized current versions of a page of Catalogs. A catalog version never changes once
   * published (an import publishes a new one for any change of pins, D15), so its pins are read and
   * serialized once; those not held yet are read together, in one query.
   */
  private async serializedCatalogVersions(
    rows: readonly repo.CatalogWithVersionRow[],
  ): Promise<Map<string, SerializedJson>> {
    const found = new Map<string, SerializedJson>();
    const missing: { columns: CatalogVersionColumns; state: string }[] = [];
    for (const row of rows) {
      const columns = catalogVersionColumnsOf(row);
      if (!columns) continue;
      // The pins are not part of the state: they never change under one id (and `manifest_hash`,
      // which is, is their digest).
      const state = rowState(columns);
      const held = this.catalogVersions.find(columns.id, state);
      if (held) found.set(columns.id, held);
      else missing.push({ columns, state });
    }
    const pins = await repo.findCatalogVersionPins(
      this.db,
      missing.map(({ columns }) => columns.id),
    );
    for (const { columns, state } of missing) {
      const pinsJson = pins.get(columns.id);
      // Catalog versions are never deleted while their Catalog exists; this is a broken invariant.
      if (pinsJson === undefined) throw new Error(`catalog version ${columns.id} vanished while read`);
      const json = serializeCatalogVersion(toCatalogVersion(columns, pinsJson));
      found.set(columns.id, this.catalogVersions.remember(columns.id, state, json));
    }
    return found;
  }

  async listResources(
    principal: Principal,
    params: CatalogParams,
    query: ListResourcesQuery,
  ): Promise<SerializedAnswer> {
    const catalog = await repo.findCatalog(this.db, principal, params.owner, params.catalogSlug);
    if (!catalog) throw new NotFoundError(`catalog ${params.owner}/${params.catalogSlug} not found`);
    const kinds = query.kind ?? [];
    const { rows, meta } = await readPage(
      query,
      () => repo.countResources(this.db, principal, catalog.id, kinds),
      (window) => repo.listResources(this.db, principal, catalog.id, kinds, window),
    );
    const items = rows.map((row) =>
      this.resourceItems.get(row.id, row.columns, () =>
        serializeResourceListItem(toResourceListItem(repo.resourceListRowOf(row.columns))),
      ),
    );
    return this.answers.answerOf(serializedPage(items, meta));
  }

  /**
   * Visibility and plan are checked on every request, before anything cached is looked at. The detail
   * is then a function of its row (which names its content by hash, and content under a hash never
   * changes), so it is serialized, and its content loaded and verified (D12), once per state of the row.
   */
  async getResource(principal: Principal, resourceId: string): Promise<SerializedAnswer> {
    const row = await repo.findResource(this.db, principal, resourceId);
    if (!row) throw new NotFoundError(`resource ${resourceId} not found`);
    this.checkPlan(principal, row.catalog_account_id, row.facets);
    const state = rowState(row);
    const held = this.resourceDetails.find(row.id, state);
    if (held) return this.answers.answerOf(held);
    const content = await this.content.read(row.v_storage_backend as StorageBackend, row.v_content_hash);
    const json = serializeResourceDetail(toResourceDetail(row, content));
    return this.answers.answerOf(this.resourceDetails.remember(row.id, state, json));
  }

  /** Visibility, then plan: a version is looked at only once its Resource may be. */
  private async gateResource(principal: Principal, resourceId: string): Promise<void> {
    const gate = await repo.findResourceGate(this.db, principal, resourceId);
    if (!gate) throw new NotFoundError(`resource ${resourceId} not found`);
    this.checkPlan(principal, gate.catalog_account_id, gate.facets);
  }

  private checkPlan(principal: Principal, catalogAccountId: string | null, facets: string | null): void {
    if (!planAllows(principal, catalogAccountId === null, parseFacets(facets))) {
      throw new ForbiddenError('this resource needs a plan the account does not have', 'plan_required');
    }
  }

  /**
   * One query when the version is there to answer; otherwise the Resource's gate says why not, in the
   * order of the rules: a Resource not visible (404), then its plan (403), then the version (404).
   */
  async findVersion(principal: Principal, resourceId: string, versionId: string): Promise<VersionHandle> {
    const row = await repo.findVersion(this.db, principal, resourceId, versionId);
    if (!row) {
      await this.gateResource(principal, resourceId);
      throw new NotFoundError(`version ${versionId} of resource ${resourceId} not found`);
    }
    this.checkPlan(principal, row.catalog_account_id, row.resource_facets);
    return { row, etag: `"${sha256Hex(canonicalJson(toVersionSummary(row)) + row.manifest)}"` };
  }

  async loadVersion(handle: VersionHandle): Promise<ResourceVersionDetail> {
    const { row } = handle;
    const content = await this.content.read(row.storage_backend as StorageBackend, row.content_hash);
    return toVersionDetail(row, content);
  }

  async listVersions(
    principal: Principal,
    resourceId: string,
    query: ListVersionsQuery,
  ): Promise<PageOf<ResourceVersionSummary>> {
    await this.gateResource(principal, resourceId);
    const { rows, meta } = await readPage(
      query,
      () => repo.countVersions(this.db, principal, resourceId),
      (window) => repo.listVersions(this.db, principal, resourceId, window),
    );
    return { data: rows.map(toVersionSummary), meta };
  }
}
