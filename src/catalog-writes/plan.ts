import { v7 } from 'uuid';
import { accountCreated } from '../accounts/accounts.js';
import { type NewChange, SERVICE_NAMESPACE } from '../changes/change-log.js';
import { canonicalJson } from '../content/hash.js';
import type {
  CatalogFacetValueTable,
  CatalogRow,
  CatalogVersionRow,
  ResourceRow,
  ResourceVersionRow,
} from '../db/tables.js';
import { yieldIfBusy } from '../foundation/pace.js';
import { FACET_KEYS, type Facets, type LifecycleStatus } from '../schemas/common.js';
import {
  type CatalogInput,
  type CatalogInputs,
  manifestDigestOf,
  type ResourceInput,
  type ResourceSource,
} from './catalog-input.js';
import { CatalogPins, manifestHashOf, type PinSource, pinChanges } from './catalog-pins.js';
import type { CatalogState, ImportOwner, NamespaceState, ResourceState } from './namespace-state.js';
import type { PlanRefusal } from './refusals.js';
import { emptyCounts, type ImportCounts, type MutableCounts, plural } from './report.js';

/** A row whose manifest is read from the tree when it is written (see `ResourceSource`). */
export type WithManifestFrom<Row extends { manifest: string }> = Omit<Row, 'manifest'> & {
  readonly manifest: string | ResourceSource;
};

/**
 * A Resource Version to insert; its manifest and content are read from `source` when it is written.
 * The row is made when it is asked for: a plan of 100,000 new Resources holds this much, not the rows.
 */
export class PlannedVersion {
  constructor(
    readonly id: string,
    readonly resourceId: string,
    private readonly resource: ResourceInput,
    private readonly now: string,
  ) {}

  get source(): ResourceSource {
    return this.resource.source;
  }

  /** Where its content goes, and its hash, without making the row. */
  get storageBackend(): ResourceInput['storageBackend'] {
    return this.resource.storageBackend;
  }

  get contentHash(): string {
    return this.resource.contentHash;
  }

  get row(): Omit<ResourceVersionRow, 'manifest'> {
    const { resource, now } = this;
    const published = resource.status !== 'draft';
    return {
      id: this.id,
      resource_id: this.resourceId,
      version: resource.version,
      content_hash: resource.contentHash,
      content_size_bytes: resource.contentSizeBytes,
      media_type: resource.mediaType,
      storage_backend: resource.storageBackend,
      status: published ? 'published' : 'draft',
      published_at: published ? now : null,
      superseded_at: null,
      archived_at: null,
      created_at: now,
    };
  }
}

/** A line of the import report made on demand (see `ImportPlan.lines`). */
export interface ReportLine {
  line(): string;
}

/** A Resource to insert or replace: its row and its change, made when it is written (see `PlannedVersion`). */
export interface PlannedResource {
  row(): WithManifestFrom<ResourceRow>;
  change(): NewChange;
}

/** A new Resource of the tree, its row made from the tree when it is written. */
class NewResource implements PlannedResource, ReportLine {
  constructor(
    private readonly id: string,
    private readonly catalogId: string,
    private readonly catalogRef: string,
    private readonly resource: ResourceInput,
    private readonly versionId: string,
    private readonly now: string,
    private readonly namespace: string,
  ) {}

  change(): NewChange {
    return {
      namespace: this.namespace,
      type: 'resource.created',
      target: { kind: 'resource', id: this.id, humanRef: `${this.catalogRef}/${this.resource.slug}` },
      summary: this.line().slice(2),
    };
  }

  line(): string {
    const { resource } = this;
    return (
      `+ resource ${this.catalogRef}/${resource.slug} (${resource.kind}, ${resource.status}): ` +
      `version ${resource.version} ${resource.status === 'draft' ? 'draft' : 'published'}, ` +
      `${resource.contentSizeBytes} bytes in ${resource.storageBackend}`
    );
  }

  row(): WithManifestFrom<ResourceRow> {
    const { resource, now } = this;
    return {
      id: this.id,
      catalog_id: this.catalogId,
      slug: resource.slug,
      kind: resource.kind,
      title: resource.title,
      status: resource.status,
      description: resource.description ?? null,
      facets: resource.facetsJson ?? null,
      manifest: resource.source,
      current_version_id: this.versionId,
      created_at: now,
      updated_at: now,
      archived_at: resource.status === 'archived' ? now : null,
    };
  }
}

/** A Catalog version to publish: its pins' JSON text is made when it is written. */
export type PlannedCatalogVersion = Omit<CatalogVersionRow, 'pins'> & {
  readonly pins: () => AsyncIterable<string>;
};

/**
 * Every write an import makes, worked out before any is made. Rows are complete: a row whose id
 * exists replaces the stored one, any other is inserted.
 */
export interface ImportPlan {
  readonly now: string;
  readonly accountToCreate?: string;
  readonly catalogRows: readonly CatalogRow[];
  /**
   * The changes of the log other than the Resources' (which each planned Resource makes when it is
   * written): the account created, the Catalogs created, changed, archived or given a version.
   */
  readonly changes: readonly NewChange[];
  /** Catalogs whose facet rows are replaced by `facetRows`. */
  readonly facetCatalogIds: readonly string[];
  readonly facetRows: readonly CatalogFacetValueTable[];
  readonly catalogVersions: readonly PlannedCatalogVersion[];
  /** New and changed Resources; the manifest of a new or changed one is read from the tree. */
  readonly resourceRows: readonly PlannedResource[];
  readonly newVersions: readonly PlannedVersion[];
  readonly supersededVersionIds: readonly string[];
  /** Draft versions that become `published` in place. */
  readonly publishedVersionIds: readonly string[];
  /**
   * What changes, one line each, in order; a created Resource's line is made when it is read (a tree of
   * 100,000 new Resources would otherwise hold 100,000 lines from planning to the report).
   */
  readonly lines: readonly (string | ReportLine)[];
  /** Changes refused because they would rewrite an immutable version label; each door says them its own way. */
  readonly refusals: readonly PlanRefusal[];
  readonly counts: ImportCounts;
}

export interface PlanOptions {
  readonly owner: ImportOwner;
  /** The one timestamp every change of this import carries. */
  readonly now: string;
  readonly newId?: () => string;
}

/** True when the plan writes nothing at all. */
export function planIsEmpty(plan: ImportPlan): boolean {
  return (
    plan.accountToCreate === undefined &&
    plan.catalogRows.length === 0 &&
    plan.changes.length === 0 &&
    plan.catalogVersions.length === 0 &&
    plan.resourceRows.length === 0 &&
    plan.newVersions.length === 0 &&
    plan.supersededVersionIds.length === 0 &&
    plan.publishedVersionIds.length === 0
  );
}

/**
 * Compares a validated tree with what is stored and decides every change, following D15:
 * - the same slug keeps its id; absent catalog folders are left as they are;
 * - a change of content, manifest, media type or version label makes a new current version and
 *   supersedes the old one; any of the first three under an unchanged label, or a label an earlier
 *   version used, is refused;
 * - a resource file that is gone archives its Resource; one that comes back un-archives it;
 * - a change of a Catalog's pins publishes a new Catalog version, which needs a new label.
 * Pure: it reads nothing and writes nothing, so a dry run is the same plan left unapplied. It lets the
 * event loop turn between Resources when it has held it for long (D20): a plan of 100,000 is seconds.
 *
 * @example
 * const plan = await planImport(tree, await loadNamespaceState(db, owner, slugs), { owner, now: new Date().toISOString() });
 * if (plan.refusals.length === 0 && !planIsEmpty(plan)) await writePlan(db, plan);
 */
export function planImport(
  tree: CatalogInputs,
  state: NamespaceState,
  options: PlanOptions,
): Promise<ImportPlan> {
  return new Planner(options).plan(tree, state);
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] extends readonly (infer U)[] ? U[] : T[K] };

class Planner {
  private readonly owner: 'svc' | 'org';
  private readonly accountId: string | null;
  /** The change log's namespace of everything planned. */
  private readonly namespace: string;
  private readonly now: string;
  private readonly newId: () => string;
  private readonly counts: MutableCounts = emptyCounts();
  private readonly out: Mutable<Omit<ImportPlan, 'now' | 'counts' | 'accountToCreate'>> = {
    catalogRows: [],
    changes: [],
    facetCatalogIds: [],
    facetRows: [],
    catalogVersions: [],
    resourceRows: [],
    newVersions: [],
    supersededVersionIds: [],
    publishedVersionIds: [],
    lines: [],
    refusals: [],
  };

  constructor(options: PlanOptions) {
    this.owner = options.owner.kind === 'svc' ? 'svc' : 'org';
    this.accountId = options.owner.kind === 'svc' ? null : options.owner.accountId;
    this.namespace = this.accountId ?? SERVICE_NAMESPACE;
    this.now = options.now;
    this.newId = options.newId ?? v7;
  }

  async plan(tree: CatalogInputs, state: NamespaceState): Promise<ImportPlan> {
    let accountToCreate: string | undefined;
    if (!state.accountExists && this.accountId !== null) {
      accountToCreate = this.accountId;
      this.counts.accountsCreated++;
      this.out.lines.push(`+ account ${this.accountId} (plan free)`);
      this.out.changes.push(accountCreated(this.accountId));
    }
    this.counts.catalogsRead = tree.catalogs.length;
    this.counts.resourceFilesRead = tree.resourceFileCount;
    for (const catalog of tree.catalogs) await this.planCatalog(catalog, state.catalogs.get(catalog.slug));
    return {
      now: this.now,
      ...(accountToCreate === undefined ? {} : { accountToCreate }),
      ...this.out,
      counts: { ...this.counts },
    };
  }

  private async planCatalog(catalog: CatalogInput, existing: CatalogState | undefined): Promise<void> {
    const catalogId = existing?.row.id ?? this.newId();
    const ref = `${this.owner}/${catalog.slug}`;
    const headerAt = this.out.lines.length;

    const pinSources: PinSource[] = [];
    let refused = false;
    const inTree = new Set<string>();
    for (const resource of catalog.resources) {
      inTree.add(resource.slug);
      const outcome = this.planResource(catalogId, ref, resource, existing?.resources.get(resource.slug));
      if (outcome === 'refused') refused = true;
      else if (resource.status === 'active') pinSources.push(outcome);
      await yieldIfBusy();
    }
    if (catalog.resourcesOnly) return;
    for (const [slug, resource] of existing?.resources ?? []) {
      if (!inTree.has(slug)) this.archiveRemoved(ref, resource);
      await yieldIfBusy();
    }

    // With a refused resource the pins are unknown; the import stops at the refusals anyway.
    let newVersion: PlannedCatalogVersion | undefined;
    if (!refused) newVersion = await this.planCatalogVersion(catalogId, catalog, existing, pinSources);

    const row = this.planCatalogRow(catalogId, catalog, existing, newVersion);
    const target = { kind: 'catalog', id: catalogId, humanRef: ref } as const;
    if (row) {
      this.out.lines.splice(headerAt, 0, row);
      const type = !existing
        ? 'catalog.created'
        : existing.row.status !== 'archived' && catalog.status === 'archived'
          ? 'catalog.archived'
          : 'catalog.updated';
      this.out.changes.push({ namespace: this.namespace, type, target, summary: row.slice(2) });
    }
    if (newVersion) {
      const previous = existing?.currentVersion ? ` (was ${existing.currentVersion.version})` : '';
      const line = `+ catalog version ${ref} ${newVersion.version}: ${plural(newVersion.resource_count, 'pin')}${previous}`;
      this.out.lines.push(line);
      this.out.changes.push({
        namespace: this.namespace,
        type: 'catalog.version_published',
        target,
        summary: line.slice(2),
      });
    }
  }

  /** Decides the catalog row; returns its report line when it changes. */
  private planCatalogRow(
    catalogId: string,
    catalog: CatalogInput,
    existing: CatalogState | undefined,
    newVersion: PlannedCatalogVersion | undefined,
  ): string | undefined {
    const ref = `${this.owner}/${catalog.slug}`;
    const facets = facetsJson(catalog.facets);
    const fields = {
      name: catalog.name,
      status: catalog.status,
      description: catalog.description ?? null,
      facets,
    };
    if (!existing) {
      this.out.catalogRows.push({
        id: catalogId,
        account_id: this.accountId,
        slug: catalog.slug,
        ...fields,
        current_version_id: newVersion?.id ?? null,
        created_at: this.now,
        updated_at: this.now,
        archived_at: catalog.status === 'archived' ? this.now : null,
      });
      this.replaceFacets(catalogId, catalog.facets);
      this.counts.catalogsCreated++;
      return `+ catalog ${ref} (${catalog.status}): ${JSON.stringify(catalog.name)}`;
    }

    const row = existing.row;
    const changed: string[] = [];
    if (row.name !== fields.name) changed.push('name');
    if (row.description !== fields.description) changed.push('description');
    const facetsChanged = !sameJson(row.facets, facets);
    if (facetsChanged) changed.push('facets');
    const statusChange =
      row.status === catalog.status ? undefined : `status ${row.status} → ${catalog.status}`;
    if (changed.length === 0 && !statusChange && !newVersion) return undefined;

    this.out.catalogRows.push({
      ...row,
      ...fields,
      current_version_id: newVersion?.id ?? row.current_version_id,
      updated_at: this.now,
      archived_at: archivedAt(row.status, row.archived_at, catalog.status, this.now),
    });
    if (facetsChanged) this.replaceFacets(catalogId, catalog.facets);
    if (changed.length === 0 && !statusChange) return undefined;
    this.counts.catalogsUpdated++;
    const parts = [
      ...(changed.length > 0 ? [`${changed.join(', ')} changed`] : []),
      ...(statusChange === undefined ? [] : [statusChange]),
    ];
    return `~ catalog ${ref}: ${parts.join('; ')}`;
  }

  private replaceFacets(catalogId: string, facets: Facets | undefined): void {
    this.out.facetCatalogIds.push(catalogId);
    for (const facet of FACET_KEYS) {
      // The facet rows back filters, so each value once even if the file repeats it.
      for (const value of new Set(facets?.[facet] ?? [])) {
        this.out.facetRows.push({ catalog_id: catalogId, facet, value });
      }
    }
  }

  private async planCatalogVersion(
    catalogId: string,
    catalog: CatalogInput,
    existing: CatalogState | undefined,
    sources: PinSource[],
  ): Promise<PlannedCatalogVersion | undefined> {
    const owner = this.owner;
    const pins = new CatalogPins(owner, catalog.slug, sources);
    const manifestHash = await manifestHashOf(pins);
    const current = existing?.currentVersion;
    if (current) {
      const pinsChanged = current.manifestHash !== manifestHash;
      if (current.version === catalog.version) {
        if (pinsChanged) {
          const changes = pinChanges(await current.pins(), [...pins]);
          const shown =
            changes.slice(0, 5).join(', ') + (changes.length > 5 ? `, … ${changes.length - 5} more` : '');
          this.out.refusals.push({
            origin: catalog.origin,
            field: 'version',
            message:
              `the catalog's pins changed (${shown}) but its version "${catalog.version}" did not; ` +
              'a catalog version label names one set of pins, so give the catalog a new version',
          });
        }
        return undefined;
      }
    }
    if (existing?.labels.has(catalog.version)) {
      this.out.refusals.push({
        origin: catalog.origin,
        field: 'version',
        message: `"${catalog.version}" already names an earlier version of this catalog; choose a new version label`,
      });
      return undefined;
    }
    const row: PlannedCatalogVersion = {
      id: this.newId(),
      catalog_id: catalogId,
      version: catalog.version,
      // The pins' text is made when it is written (100,000 pins are tens of megabytes of it).
      pins: () => pins.jsonSlices(),
      manifest_hash: manifestHash,
      resource_count: pins.count,
      published_at: this.now,
      created_at: this.now,
    };
    this.out.catalogVersions.push(row);
    this.counts.catalogVersionsPublished++;
    return row;
  }

  /** Decides one Resource; returns what its pin would be, or `refused`. */
  private planResource(
    catalogId: string,
    catalogRef: string,
    resource: ResourceInput,
    existing: ResourceState | undefined,
  ): PinSource | 'refused' {
    const ref = `${catalogRef}/${resource.slug}`;
    const fields = {
      kind: resource.kind,
      title: resource.title,
      status: resource.status,
      description: resource.description ?? null,
      facets: resource.facetsJson ?? null,
    };

    if (!existing) {
      const id = this.newId();
      const version = this.newVersion(id, resource);
      const created = new NewResource(
        id,
        catalogId,
        catalogRef,
        resource,
        version.id,
        this.now,
        this.namespace,
      );
      this.out.resourceRows.push(created);
      this.counts.resourcesCreated++;
      this.out.lines.push(created);
      return pinSource(id, resource, version.id);
    }

    const row = existing.row;
    const current = existing.currentVersion;
    const parts: string[] = [];
    let currentVersionId: string;
    // A new current version, or a draft one published in place.
    let published = false;

    if (!current || current.version !== resource.version) {
      if (existing.labels.has(resource.version)) {
        this.out.refusals.push({
          origin: resource.origin,
          field: 'version',
          message: `"${resource.version}" already names an earlier version of this resource; choose a new version label`,
        });
        return 'refused';
      }
      currentVersionId = this.newVersion(row.id, resource).id;
      published = resource.status !== 'draft';
      if (current) {
        this.out.supersededVersionIds.push(current.id);
        this.counts.resourceVersionsSuperseded++;
        const changes = versionChanges(current, resource);
        const why = changes.length > 0 ? `${changes.join(', ')} changed` : 'new label';
        parts.push(
          `version ${current.version} → ${resource.version} (${why}; ${current.version} superseded)`,
        );
      } else {
        parts.push(`version ${resource.version}`);
      }
    } else {
      const changes = versionChanges(current, resource);
      if (changes.length > 0) {
        this.out.refusals.push({
          origin: resource.origin,
          field: 'version',
          message:
            `${changes.join(', ')} changed but the version "${resource.version}" did not; ` +
            'a version label names immutable content, so give the new version a new label',
        });
        return 'refused';
      }
      currentVersionId = current.id;
      if (row.status === 'draft' && resource.status !== 'draft' && current.status === 'draft') {
        // Leaving draft publishes the version as it is: only its lifecycle fields move, never its content.
        this.out.publishedVersionIds.push(current.id);
        this.counts.resourceVersionsPublished++;
        published = true;
        parts.push(`version ${current.version} published`);
      }
    }

    const changed: string[] = (['kind', 'title', 'description'] as const).filter(
      (key) => row[key] !== fields[key],
    );
    if (!sameJson(row.facets, fields.facets)) changed.push('facets');
    const manifestChanged = manifestDigestOf(row.manifest) !== resource.manifestDigest;
    if (manifestChanged) changed.push('manifest');
    if (changed.length > 0) parts.push(`${changed.join(', ')} changed`);
    if (row.status !== resource.status) parts.push(`status ${row.status} → ${resource.status}`);

    if (parts.length === 0) {
      this.counts.resourcesUnchanged++;
    } else {
      const changedRow: WithManifestFrom<ResourceRow> = {
        ...row,
        ...fields,
        manifest: manifestChanged ? resource.source : row.manifest,
        current_version_id: currentVersionId,
        updated_at: this.now,
        archived_at: archivedAt(row.status, row.archived_at, resource.status, this.now),
      };
      const summary = `resource ${ref}: ${parts.join('; ')}`;
      const type =
        row.status !== 'archived' && resource.status === 'archived'
          ? 'resource.archived'
          : published
            ? 'resource.version_published'
            : 'resource.updated';
      const change: NewChange = {
        namespace: this.namespace,
        type,
        target: { kind: 'resource', id: row.id, humanRef: ref },
        summary,
      };
      this.out.resourceRows.push({ row: () => changedRow, change: () => change });
      this.counts.resourcesUpdated++;
      this.out.lines.push(`~ ${summary}`);
    }
    return pinSource(row.id, resource, currentVersionId);
  }

  private newVersion(resourceId: string, resource: ResourceInput): PlannedVersion {
    const version = new PlannedVersion(this.newId(), resourceId, resource, this.now);
    this.out.newVersions.push(version);
    this.counts.resourceVersionsCreated++;
    return version;
  }

  private archiveRemoved(catalogRef: string, resource: ResourceState): void {
    if (resource.row.status === 'archived') return;
    const archived: ResourceRow = {
      ...resource.row,
      status: 'archived',
      updated_at: this.now,
      archived_at: this.now,
    };
    const ref = `${catalogRef}/${resource.row.slug}`;
    const summary = `resource ${ref}: archived (its file is gone)`;
    const change: NewChange = {
      namespace: this.namespace,
      type: 'resource.archived',
      target: { kind: 'resource', id: resource.row.id, humanRef: ref },
      summary,
    };
    this.out.resourceRows.push({ row: () => archived, change: () => change });
    this.counts.resourcesArchived++;
    this.out.lines.push(`- ${summary}`);
  }
}

/** What makes `resource` a different Resource Version from `current`, the label aside. */
function versionChanges(current: ResourceVersionRow, resource: ResourceInput): string[] {
  return [
    ...(current.content_hash === resource.contentHash ? [] : ['content']),
    ...(manifestDigestOf(current.manifest) === resource.manifestDigest ? [] : ['manifest']),
    ...(current.media_type === resource.mediaType ? [] : ['mediaType']),
  ];
}

/**
 * What a Resource's pin will be, read from the Resource when the pin is made: a Catalog of 100,000
 * holds these until its version is written, and a copy of each digest and label would double them.
 */
class PlannedPin implements PinSource {
  constructor(
    readonly resourceId: string,
    private readonly resource: ResourceInput,
    readonly versionId: string,
  ) {}

  get slug(): string {
    return this.resource.slug;
  }

  get version(): string {
    return this.resource.version;
  }

  get contentHash(): string {
    return this.resource.contentHash;
  }
}

function pinSource(resourceId: string, resource: ResourceInput, versionId: string): PinSource {
  return new PlannedPin(resourceId, resource, versionId);
}

function facetsJson(facets: Facets | undefined): string | null {
  return facets === undefined ? null : JSON.stringify(facets);
}

/** Equal as JSON values: key order in a file is not a change. */
function sameJson(stored: string | null, next: string | null): boolean {
  if (stored === null || next === null) return stored === next;
  return stored === next || canonicalJson(JSON.parse(stored)) === canonicalJson(JSON.parse(next));
}

/** `archivedAt` is set when a status becomes `archived` and cleared when it stops being so. */
function archivedAt(
  before: string,
  archivedAtBefore: string | null,
  after: LifecycleStatus,
  now: string,
): string | null {
  if (after !== 'archived') return null;
  return before === 'archived' ? (archivedAtBefore ?? now) : now;
}
