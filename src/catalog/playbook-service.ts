import type { Principal } from '../auth/principal.js';
import type { ContentReader } from '../content/content-reader.js';
import { canonicalJson, sha256Hex } from '../content/hash.js';
import type { Db, ResourceVersionRow } from '../db/tables.js';
import { ForbiddenError, NotFoundError } from '../errors.js';
import { DEFAULT_PAGE_SIZE, type PageMeta } from '../schemas/common.js';
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
  StorageBackend,
} from '../schemas/playbook.js';
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

export interface PageOf<T> {
  readonly data: T[];
  readonly meta: PageMeta;
}

interface PageRequest {
  readonly page?: number;
  readonly pageSize?: number;
}

/** Counts first, so that a page past the end costs no second query (D3). */
async function paginate<R, T>(
  request: PageRequest,
  count: () => Promise<number>,
  fetch: (window: repo.PageWindow) => Promise<R[]>,
  map: (row: R) => T,
): Promise<PageOf<T>> {
  const page = request.page ?? 1;
  const pageSize = request.pageSize ?? DEFAULT_PAGE_SIZE;
  const total = await count();
  const offset = (page - 1) * pageSize;
  const rows = offset < total ? await fetch({ offset, limit: pageSize }) : [];
  return { data: rows.map(map), meta: { page, pageSize, pageCount: Math.ceil(total / pageSize), total } };
}

/** A Resource Version without its content yet, and the strong validator of its full answer (D11). */
export interface VersionHandle {
  readonly row: ResourceVersionRow;
  readonly etag: string;
}

/** The read side of the playbook area: what the four read operations and the history list answer. */
export class PlaybookService {
  constructor(
    private readonly db: Db,
    private readonly content: ContentReader,
  ) {}

  listCatalogs(principal: Principal, query: ListCatalogsQuery): Promise<PageOf<Catalog>> {
    const filters: repo.CatalogFilters = { sourceScopes: query.sourceScope, capability: query.capability };
    return paginate(
      query,
      () => repo.countCatalogs(this.db, principal, filters),
      (window) => repo.listCatalogs(this.db, principal, filters, window),
      toCatalog,
    );
  }

  async listResources(
    principal: Principal,
    params: CatalogParams,
    query: ListResourcesQuery,
  ): Promise<PageOf<ResourceListItem>> {
    const catalog = await repo.findCatalog(this.db, principal, params.owner, params.catalogSlug);
    if (!catalog) throw new NotFoundError(`catalog ${params.owner}/${params.catalogSlug} not found`);
    const kinds = query.kind ?? [];
    return paginate(
      query,
      () => repo.countResources(this.db, principal, catalog.id, kinds),
      (window) => repo.listResources(this.db, principal, catalog.id, kinds, window),
      toResourceListItem,
    );
  }

  async getResource(principal: Principal, resourceId: string): Promise<ResourceDetail> {
    const row = await repo.findResource(this.db, principal, resourceId);
    if (!row) throw new NotFoundError(`resource ${resourceId} not found`);
    this.checkPlan(principal, row.catalog_account_id, row.facets);
    const content = await this.content.read(row.v_storage_backend as StorageBackend, row.v_content_hash);
    return toResourceDetail(row, content);
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

  async findVersion(principal: Principal, resourceId: string, versionId: string): Promise<VersionHandle> {
    await this.gateResource(principal, resourceId);
    const row = await repo.findVersion(this.db, principal, resourceId, versionId);
    if (!row) throw new NotFoundError(`version ${versionId} of resource ${resourceId} not found`);
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
    return paginate(
      query,
      () => repo.countVersions(this.db, principal, resourceId),
      (window) => repo.listVersions(this.db, principal, resourceId, window),
      toVersionSummary,
    );
  }
}
