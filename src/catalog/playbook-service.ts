import type { Principal } from '../auth/principal.js';
import type { ContentReader } from '../content/content-reader.js';
import type { ReadNow } from '../db/create-db.js';
import type { CatalogRow, Db } from '../db/tables.js';
import { ForbiddenError, NotFoundError } from '../foundation/errors.js';
import { growingCache } from '../foundation/growing-cache.js';
import { readPage } from '../foundation/paging.js';
import type { PageMeta } from '../schemas/common.js';
import type {
  Catalog,
  CatalogParams,
  ListCatalogsQuery,
  ListResourcesQuery,
  ListVersionsQuery,
  ResourceDetail,
  ResourceKind,
  ResourceListItem,
  ResourceRefParams,
  ResourceVersionDetail,
  ResourceVersionSummary,
} from '../schemas/playbook.js';
import {
  type Audience,
  accountView,
  audienceOf,
  listAudience,
  namespaceOf,
  type Seen,
  viewNamespaces,
} from './audience.js';
import {
  parseFacets,
  toCatalog,
  toResourceDetail,
  toResourceListItem,
  toVersionDetail,
  toVersionSummary,
} from './mappers.js';
import { type CatalogTagRow, readCatalogTagger, resourceTag } from './object-tags.js';
import * as repo from './read-repository.js';
import {
  findStoredDetail,
  findStoredDetailNow,
  type OwnerDetail,
  STORED_DETAIL_FORM,
  type StoredDetail,
} from './stored-details.js';
import {
  type PinsHead,
  type PinsReading,
  readPinsHeads,
  readStoredPins,
  storedPinsText,
} from './stored-pins.js';
import { catalogAdmitted, planAllows } from './visibility.js';

export interface PageOf<T> {
  readonly data: T[];
  readonly meta: PageMeta;
}

/**
 * Where the positions of lists of a Catalog's Resources (`ListPositions`) are kept between reads: the
 * read side reads them once, and whoever keeps answers keeps them too, dropped with the namespaces they
 * are made of.
 */
export interface PositionsMemo {
  held(catalogId: string, kinds: readonly ResourceKind[]): repo.ListPositions | undefined;
  keep(
    catalogId: string,
    kinds: readonly ResourceKind[],
    positions: repo.ListPositions,
    namespaces: readonly string[],
  ): void;
}

const NO_MEMO: PositionsMemo = { held: () => undefined, keep: () => {} };

/**
 * Catalogs whose pins are read as they are needed: the stored JSON text of their current versions'
 * pins, a part at a time. A Catalog version of 100,000 Resources pins 20 MB of text, which a whole
 * answer would hold at once.
 */
export interface PinsInStorage {
  /** The ids of the current versions, in the answer's order. */
  readonly versionIds: readonly string[];
  /** Pins they hold in all, as each version counts them. */
  readonly pinCount: number;
  /**
   * A reader of the pins for one pass over the answer: the JSON text of a version's pins (`[{…},…]`,
   * exactly as the contract writes them), in parts; reading stops when the iteration does. A
   * version's pins never change, so a pass begun long after the Catalogs were read reads the same text.
   * `reading` as `storedPinsText` takes it: what a block of the answer needs per statement.
   */
  readPins(reading: PinsReading): (versionId: string) => AsyncGenerator<string>;
}

/** A page of Catalogs with each current version's `resourcePins` left empty, and its pins in storage. */
export interface CatalogsPage extends PinsInStorage {
  readonly page: PageOf<Catalog>;
}

/** One Catalog with its current version's `resourcePins` left empty, and its pins in storage. */
export interface CatalogRead extends PinsInStorage {
  readonly catalog: Catalog;
}

/** A detail's answer text as the read model stores it (its version tag is the `Seen`'s). */
export interface StoredText {
  readonly text: string;
}

/**
 * A Resource Version read without its content: every field of its detail but the content (an empty
 * string in its place), whose hash and size stand for it, and the content's load. A revalidation can be
 * answered from it without loading content (D11).
 */
export interface VersionRead {
  readonly withoutContent: ResourceVersionDetail;
  /** Loads the content and checks it against its hash (D12). */
  content(): Promise<string>;
}

/**
 * The read side of the playbook area: what the four read operations and the history list see, as
 * domain values. Each read goes through the visibility rules (D5) and the plan gate (D6), and says who
 * else sees the same value (its audience) and which namespaces of the change log it is made of, so that
 * whoever keeps it knows with whom it may be shared and when it is stale. Scopes are checked before
 * any of this, by the route.
 */
export class PlaybookService {
  /**
   * The Catalog of each Resource a restricted key asked for lately (D32): a Resource never moves, and
   * a Catalog's owner and slug never change, so what was read once holds.
   */
  private readonly places = growingCache<string, CatalogPlace>(KEPT_PLACES);

  /**
   * @param readNow where a search of the read model may be made at once (`Databases.readNow`, SQLite's
   *   reader), for `storedResourceNow`
   */
  constructor(
    private readonly db: Db,
    private readonly content: ContentReader,
    private readonly readNow?: ReadNow,
  ) {}

  /**
   * D32: whether `principal`'s key admits the Catalog of the Resource `resourceId`, known at once when
   * it is not restricted to some Catalogs or the Resource's Catalog was read before; false for a
   * Resource that does not exist. A Resource's answers (its detail, versions and their list) are the
   * same for every caller that may see it: once its Catalog is admitted, they are shared.
   */
  admitsResource(principal: Principal, resourceId: string): boolean | Promise<boolean> {
    if (principal.restrictions === null || principal.restrictions.catalogs === null) return true;
    const place = this.places.get(resourceId);
    if (place) return catalogAdmitted(principal, place.accountId, place.slug);
    return repo.catalogOfResource(this.db, resourceId).then((found) => {
      if (!found) return false;
      this.places.set(resourceId, found);
      return catalogAdmitted(principal, found.accountId, found.slug);
    });
  }

  /**
   * The audience of a list of Catalogs, known before reading it: the service's Catalogs alone are the
   * same for every caller; with an account's, the list is that account's view; either way, of keys
   * restricted to the same Catalogs when the caller's is (D32).
   */
  catalogsAudience(principal: Principal, query: ListCatalogsQuery): Audience | null {
    return listAudience(principal, serviceOnly(query) ? null : accountView(principal));
  }

  async listCatalogs(principal: Principal, query: ListCatalogsQuery): Promise<Seen<PageOf<Catalog>>> {
    const filters: repo.CatalogFilters = { sourceScopes: query.sourceScope, capability: query.capability };
    const { rows, meta } = await readPage(
      query,
      () => repo.countCatalogs(this.db, principal, filters),
      (window) => repo.listCatalogs(this.db, principal, filters, window),
    );
    const data: Catalog[] = [];
    for (const { catalog, currentVersion } of rows) {
      const pins = currentVersion && (await readStoredPins(this.db, currentVersion.id));
      data.push(toCatalog(catalog, currentVersion, pins));
    }
    return {
      value: { data, meta },
      audience: this.catalogsAudience(principal, query),
      namespaces: serviceOnly(query) ? [namespaceOf(null)] : viewNamespaces(principal),
    };
  }

  /**
   * `listCatalogs` with its pins left in storage until they are read (`CatalogsPage`): what the list's
   * answer is written from as it is sent.
   */
  async catalogsPage(principal: Principal, query: ListCatalogsQuery): Promise<Seen<CatalogsPage>> {
    const filters: repo.CatalogFilters = { sourceScopes: query.sourceScope, capability: query.capability };
    const { rows, meta } = await readPage(
      query,
      () => repo.countCatalogs(this.db, principal, filters),
      (window) => repo.listCatalogs(this.db, principal, filters, window),
    );
    return {
      value: {
        page: {
          data: rows.map((row) => toCatalog(row.catalog, row.currentVersion)),
          meta,
        },
        ...pinsInStorage(this.db, rows),
      },
      audience: this.catalogsAudience(principal, query),
      namespaces: serviceOnly(query) ? [namespaceOf(null)] : viewNamespaces(principal),
    };
  }

  /**
   * The audience of what one Catalog's ref names, the Catalog or its list of Resources: a service
   * Catalog's are the same for all.
   */
  catalogAudience(principal: Principal, params: CatalogParams): Audience | null {
    return params.owner === 'svc' ? null : accountView(principal);
  }

  /**
   * One Catalog by its human ref `owner/slug` (D29), as the list shows it, its pins left in storage
   * until its answer is written, validated by its version tag: the ETag of its answer is a valid
   * If-Match for the Catalog's writes.
   */
  async getCatalog(principal: Principal, params: CatalogParams): Promise<Seen<CatalogRead>> {
    const row = await repo.findCatalogByRef(this.db, principal, params.owner, params.catalogSlug);
    if (!row) throw new NotFoundError(`catalog ${params.owner}/${params.catalogSlug} not found`);
    return {
      value: { catalog: toCatalog(row.catalog, row.currentVersion), ...pinsInStorage(this.db, [row]) },
      audience: this.catalogAudience(principal, params),
      namespaces: [namespaceOf(row.catalog.account_id)],
      tag: await this.catalogTag(row.catalog),
    };
  }

  async listResources(
    principal: Principal,
    params: CatalogParams,
    query: ListResourcesQuery,
    memo: PositionsMemo = NO_MEMO,
  ): Promise<Seen<PageOf<ResourceListItem>>> {
    const catalog = await repo.findCatalog(this.db, principal, params.owner, params.catalogSlug);
    if (!catalog) throw new NotFoundError(`catalog ${params.owner}/${params.catalogSlug} not found`);
    const kinds = query.kind ?? [];
    const namespaces = [namespaceOf(catalog.account_id)];
    let positions = memo.held(catalog.id, kinds);
    if (positions === undefined) {
      positions = await repo.resourcePositions(this.db, catalog, kinds);
      memo.keep(catalog.id, kinds, positions, namespaces);
    }
    const held = positions;
    const { rows, meta } = await readPage(query, held.total, (window) =>
      repo.listResources(this.db, catalog, kinds, window, held),
    );
    return {
      value: { data: rows.map(toResourceListItem), meta },
      audience: this.resourcesAudience(principal, params),
      namespaces,
    };
  }

  /** The audience of a list of one Catalog's Resources: its Catalog's, per restriction set (D32). */
  resourcesAudience(principal: Principal, params: CatalogParams): Audience | null {
    return listAudience(principal, params.owner === 'svc' ? null : accountView(principal));
  }

  async getResource(principal: Principal, resourceId: string): Promise<Seen<ResourceDetail>> {
    const row = await repo.findResource(this.db, principal, resourceId);
    if (!row) throw new NotFoundError(`resource ${resourceId} not found`);
    return this.detailOf(principal, row);
  }

  /**
   * `getResource` from the read model (D30): the stored text of the Resource's detail, when the table
   * holds one of the current form that the caller may see (the plan gate applies as it does to a read
   * from the rows). None otherwise, and the detail is read from the rows; `missing` is told of a row
   * not of the current form, to have it written again.
   */
  async storedResource(
    principal: Principal,
    resourceId: string,
    missing: (resourceId: string) => void,
  ): Promise<Seen<StoredText> | undefined> {
    // One outside the Catalogs a key is restricted to (D32) is not found either: the read model does
    // not hold its place.
    if (principal.restrictions?.catalogs && !(await this.admitsResource(principal, resourceId))) {
      return undefined;
    }
    return this.seenOfStored(principal, resourceId, await findStoredDetail(this.db, resourceId), missing);
  }

  /**
   * `storedResource` at once, without a promise, where the database can search without one (SQLite);
   * `undefined` otherwise, as when the read model holds no row of the current form.
   */
  storedResourceNow(
    principal: Principal,
    resourceId: string,
    missing: (resourceId: string) => void,
  ): Seen<StoredText> | undefined {
    if (!this.readNow) return undefined;
    if (principal.restrictions?.catalogs && this.admitsResource(principal, resourceId) !== true)
      return undefined;
    const row = findStoredDetailNow(this.db, this.readNow, resourceId);
    return this.seenOfStored(principal, resourceId, row, missing);
  }

  /** What a caller sees of a stored detail: its own or the service's, past the plan gate (D6). */
  private seenOfStored(
    principal: Principal,
    resourceId: string,
    row: StoredDetail | undefined,
    missing: (resourceId: string) => void,
  ): Seen<StoredText> | undefined {
    if (row === undefined) return undefined;
    if (row.form !== STORED_DETAIL_FORM) {
      missing(resourceId);
      return undefined;
    }
    // Another account's Resource is read the way it always is: not found.
    if (row.account_id !== null && row.account_id !== principal.accountId) return undefined;
    // Most Resources name no plan: their facets are parsed only when they do (D6).
    if (row.facets?.includes('"planAccess"')) this.checkPlan(principal, row.account_id, row.facets);
    return {
      value: { text: row.body },
      audience: audienceOf(principal, row.account_id),
      namespaces: [namespaceOf(row.account_id)],
      tag: row.tag,
    };
  }

  /**
   * A Resource's detail as its owner's callers see it, without the plan gate: what the read model
   * stores. None when its owner does not see it (a service draft) or it is absent.
   */
  async ownerDetail(resourceId: string): Promise<OwnerDetail | undefined> {
    const owner = await repo.ownerOfResource(this.db, resourceId);
    if (!owner) return undefined;
    const row = await repo.findResource(this.db, owner, resourceId);
    if (!row) return undefined;
    return {
      detail: toResourceDetail(row, await this.contentOf(row)),
      tag: resourceTag(row.resource, row.currentVersion),
      accountId: row.catalogAccountId,
      facets: row.resource.facets,
    };
  }

  /**
   * The audience of the Resource a human ref names, known before reading it: a service Resource's
   * detail is seen alike by every caller on the same plan (D6), an account's by its callers.
   */
  resourceRefAudience(principal: Principal, params: ResourceRefParams): Audience {
    return params.owner === 'svc' ? audienceOf(principal, null) : accountView(principal);
  }

  /** One Resource by its human ref `owner/catalogSlug/resourceSlug` (D29): `getResource`'s rules. */
  async getResourceByRef(principal: Principal, params: ResourceRefParams): Promise<Seen<ResourceDetail>> {
    const { owner, catalogSlug, resourceSlug } = params;
    const row = await repo.findResourceByRef(this.db, principal, owner, catalogSlug, resourceSlug);
    if (!row) throw new NotFoundError(`resource ${owner}/${catalogSlug}/${resourceSlug} not found`);
    return this.detailOf(principal, row);
  }

  /** A Resource's detail once it is found visible: its plan gate (D6), then its content. */
  private async detailOf(principal: Principal, row: repo.ResourceDetailRow): Promise<Seen<ResourceDetail>> {
    this.checkPlan(principal, row.catalogAccountId, row.resource.facets);
    return {
      value: toResourceDetail(row, await this.contentOf(row)),
      audience: audienceOf(principal, row.catalogAccountId),
      namespaces: [namespaceOf(row.catalogAccountId)],
      tag: resourceTag(row.resource, row.currentVersion),
    };
  }

  /** A detail's content: read with its row from the database, or from its store; checked (D12). */
  private async contentOf(row: repo.ResourceDetailRow): Promise<string> {
    const { content_hash, storage_backend } = row.currentVersion;
    return typeof row.storedContent === 'string'
      ? this.content.checked(storage_backend, content_hash, row.storedContent)
      : this.content.read(storage_backend, content_hash);
  }

  /**
   * The version tag of a Catalog (object-tags.ts), read now: what an answer of the Catalog alone is
   * validated by, so that its ETag is a valid If-Match for the Catalog's writes (D29).
   */
  async catalogTag(catalog: CatalogTagRow & Pick<CatalogRow, 'account_id'>): Promise<string> {
    return (await readCatalogTagger(this.db, namespaceOf(catalog.account_id)))(catalog);
  }

  async listVersions(
    principal: Principal,
    resourceId: string,
    query: ListVersionsQuery,
  ): Promise<Seen<PageOf<ResourceVersionSummary>>> {
    const gate = await this.gateResource(principal, resourceId);
    const { rows, meta } = await readPage(
      query,
      () => repo.countVersions(this.db, principal, resourceId),
      (window) => repo.listVersions(this.db, principal, resourceId, window),
    );
    return {
      value: { data: rows.map(toVersionSummary), meta },
      audience: audienceOf(principal, gate.catalogAccountId),
      namespaces: [namespaceOf(gate.catalogAccountId)],
    };
  }

  /** A Resource Version, its content not loaded until asked for. */
  async getVersion(principal: Principal, resourceId: string, versionId: string): Promise<Seen<VersionRead>> {
    const found = await repo.findVersion(this.db, principal, resourceId, versionId);
    if (!found) {
      // In the order of the rules: the Resource not visible (404), its plan (403), the version (404).
      await this.gateResource(principal, resourceId);
      throw new NotFoundError(`version ${versionId} of resource ${resourceId} not found`);
    }
    const { version, gate } = found;
    this.checkPlan(principal, gate.catalogAccountId, gate.facets);
    return {
      value: {
        withoutContent: toVersionDetail(version, ''),
        content: () => this.content.read(version.storage_backend, version.content_hash),
      },
      audience: audienceOf(principal, gate.catalogAccountId),
      namespaces: [namespaceOf(gate.catalogAccountId)],
    };
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

/**
 * The pins of Catalogs' current versions, left in storage: the first part of every version is read in
 * one statement (the whole of most), the rest of a large one as it is asked for; each is let go once
 * yielded.
 */
function pinsInStorage(db: Db, rows: readonly repo.CatalogListRow[]): PinsInStorage {
  const versionIds = rows.flatMap((row) => row.currentVersion?.id ?? []);
  return {
    versionIds,
    pinCount: rows.reduce((sum, row) => sum + Number(row.currentVersion?.resource_count ?? 0), 0),
    readPins: (reading) => {
      let heads: Promise<Map<string, PinsHead>> | undefined;
      return async function* pinsText(versionId: string): AsyncGenerator<string> {
        heads ??= readPinsHeads(db, versionIds);
        const held = await heads;
        const head = held.get(versionId);
        if (head === undefined) throw new Error(`version ${versionId} is not of this answer`);
        held.delete(versionId);
        yield* storedPinsText(db, versionId, head, reading);
      };
    },
  };
}

/** Resources whose Catalog is held for restricted keys (D32): a few hundred bytes each. */
const KEPT_PLACES = 10_000;

/** Where a Resource is: its Catalog's account (null for the service's) and slug. */
interface CatalogPlace {
  readonly accountId: string | null;
  readonly slug: string;
}

/** Whether a list of Catalogs asks for the service's alone. */
function serviceOnly(query: ListCatalogsQuery): boolean {
  const scopes = new Set(query.sourceScope ?? []);
  return scopes.size === 1 && scopes.has('svc');
}
