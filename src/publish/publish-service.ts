import { v7 } from 'uuid';
import type { Principal } from '../auth/principal.js';
import { toCatalog } from '../catalog/mappers.js';
import { readCatalogTagger, resourceTag } from '../catalog/object-tags.js';
import { readStoredPins, storedPinsText, writeStoredPins } from '../catalog/stored-pins.js';
import { catalogRefAdmitted } from '../catalog/visibility.js';
import {
  type ApplyOptions,
  applyCatalogs,
  type CatalogWriteDeps,
  countedWrite,
} from '../catalog-writes/apply.js';
import {
  type CatalogInput,
  defaultStorageBackend,
  manifestDigestOf,
  type ResourceBody,
  type ResourceInput,
  type ResourceSource,
} from '../catalog-writes/catalog-input.js';
import { CatalogPins, manifestHashOf, type PinSource } from '../catalog-writes/catalog-pins.js';
import type { CatalogState, NamespaceState, ResourceState } from '../catalog-writes/namespace-state.js';
import { loadNamespaceState } from '../catalog-writes/namespace-state.js';
import { ImportValidationError } from '../catalog-writes/refusals.js';
import type { ImportCounts, ReportLines } from '../catalog-writes/report.js';
import type { ChangeActor } from '../changes/change-log.js';
import type { UnitOfWork, Writer, WriteScope } from '../changes/unit-of-work.js';
import { sha256Hex, utf8Size } from '../content/hash.js';
import type { Db } from '../db/tables.js';
import {
  ConflictError,
  ForbiddenError,
  InputError,
  type InputProblem,
  NotFoundError,
  PreconditionFailedError,
} from '../foundation/errors.js';
import { Interned } from '../foundation/interned.js';
import { yieldIfBusy } from '../foundation/pace.js';
import { RawJsonParts } from '../foundation/sliced-json.js';
import { byText } from '../foundation/text-order.js';
import { holdsAtMost } from '../foundation/value-size.js';
import { createOnly, matchHolds, noneMatchNamesState, representationTag } from '../http/conditional.js';
import { tooLarge } from '../import/content-file.js';
import { Metrics } from '../observability/metrics.js';
import { MAX_LISTED_PROBLEMS } from '../schemas/common.js';
import type { Catalog } from '../schemas/playbook.js';
import type {
  PublishChanges,
  PublishedResource,
  PublishReport,
  PutCatalogBody,
  PutResourceBody,
} from '../schemas/publish.js';
import { BodySpool, type SpoolPlace } from './body-spool.js';

/** Who writes, and the preconditions their request carries (D23). */
export interface WriteContext {
  readonly principal: Principal;
  readonly requestId: string;
  /** `If-Match`: the write goes ahead only if the object's current ETag is one of these (or `*`). */
  readonly ifMatch?: string | undefined;
  /** `If-None-Match: *`: the write only creates. */
  readonly ifNoneMatch?: string | undefined;
}

export interface PublishOptions {
  /** D20: the most bytes of content one Resource Version may have. */
  readonly maxContentBytes: number;
  readonly now?: () => string;
}

/** A write's answer: what to send, its status, and the written object's ETag. */
export interface WriteAnswer<T> {
  readonly status: 200 | 201;
  readonly body: T;
  readonly etag?: string;
}

/**
 * A Catalog whose current version's pins are their stored JSON text, read a part at a time as the
 * answer is sent: a Catalog of 100,000 Resources pins 20 MB (D30).
 */
type CatalogWithStoredPins = Omit<Catalog, 'currentVersion'> & {
  readonly currentVersion?: Omit<NonNullable<Catalog['currentVersion']>, 'resourcePins'> & {
    readonly resourcePins: RawJsonParts;
  };
};

/**
 * The body of a whole Catalog's write answer: the report, its lines made as they are written (a
 * publish of 100,000 Resources reports 100,000 lines) and its Catalog's pins read as they are written
 * (D30).
 */
export type PublishAnswer = Omit<PublishReport, 'catalog' | 'lines'> & {
  readonly catalog?: CatalogWithStoredPins;
  readonly lines: ReportLines;
};

/** The body of a one-Resource write answer: the Resource as stored, with its ETag's state. */
export interface ResourceWrite {
  readonly catalog: Catalog;
  readonly resource: { readonly slug: string; readonly id: string; readonly currentVersionId: string | null };
  readonly changes: PublishChanges;
}

/**
 * Keys and values one manifest may hold, at any depth (D20): digesting one is a single step, and a
 * manifest of a million keys was seconds of it.
 */
const MAX_MANIFEST_VALUES = 10_000;

/** ES2024's `String.prototype.isWellFormed` (Node 20 has it; this project's TypeScript library does not). */
function wellFormed(text: string): boolean {
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}

/** Bytes of a SHA-256 digest. */
const DIGEST_BYTES = 32;

/**
 * A Resource of a request body, as the planner takes it: its fields, and its digests, manifest and
 * content kept as bytes in the body's spool (a Catalog's body holds 100,000 of these, D30). The
 * body's object itself, its manifest as an object among them, is let go once this is made.
 */
class BodyResource implements ResourceInput, ResourceSource {
  readonly kind: ResourceInput['kind'];
  readonly title: string;
  readonly version: string;
  readonly mediaType: string;
  readonly status: ResourceInput['status'];
  readonly description: string | undefined;
  readonly facetsJson: string | undefined;
  readonly storageBackend: ResourceInput['storageBackend'];
  readonly contentSizeBytes: number;
  /** The content's and the manifest's digests, the manifest's JSON text and the content, in that order. */
  private readonly spooled: SpoolPlace;
  private readonly manifestBytes: number;

  constructor(
    readonly slug: string,
    /** Its index in a whole Catalog's body, -1 in a one-Resource body (`origin` says it in text). */
    private readonly index: number,
    spec: PutResourceBody,
    /** Shared by the Resources of one body: the texts they repeat are held once. */
    interned = new Interned(),
    spool = new BodySpool(0),
  ) {
    this.kind = interned.of(spec.kind) as ResourceInput['kind'];
    this.title = spec.title;
    this.version = interned.of(spec.version);
    this.mediaType = interned.of(spec.mediaType);
    this.status =
      spec.status === undefined ? 'active' : (interned.of(spec.status) as ResourceInput['status']);
    this.description = spec.description;
    this.facetsJson = spec.facets === undefined ? undefined : interned.of(JSON.stringify(spec.facets));
    const manifest = JSON.stringify(spec.manifest ?? {});
    this.manifestBytes = utf8Size(manifest);
    this.contentSizeBytes = utf8Size(spec.content);
    const digests = [sha256Hex(spec.content), manifestDigestOf(manifest)].map((hex) =>
      Buffer.from(hex, 'hex'),
    );
    this.spooled = spool.put(digests, [manifest, spec.content]);
    this.storageBackend =
      spec.storageBackend === undefined
        ? defaultStorageBackend(this.contentSizeBytes)
        : (interned.of(spec.storageBackend) as ResourceInput['storageBackend']);
  }

  /** `resources[3]` in a whole Catalog's body, '' in a one-Resource body. */
  get origin(): string {
    return this.index < 0 ? '' : `resources[${this.index}]`;
  }

  get contentHash(): string {
    const { chunk, at } = this.spooled;
    return chunk.toString('hex', at, at + DIGEST_BYTES);
  }

  get manifestDigest(): string {
    const { chunk, at } = this.spooled;
    return chunk.toString('hex', at + DIGEST_BYTES, at + 2 * DIGEST_BYTES);
  }

  get source(): ResourceSource {
    return this;
  }

  async read(): Promise<ResourceBody> {
    const { chunk, at } = this.spooled;
    const manifestAt = at + 2 * DIGEST_BYTES;
    const contentAt = manifestAt + this.manifestBytes;
    return {
      manifest: chunk.toString('utf8', manifestAt, contentAt),
      content: chunk.toString('utf8', contentAt, contentAt + this.contentSizeBytes),
    };
  }
}

/**
 * The ETag of a Catalog as a writer sees it: its version tag (object-tags.ts), the same the read side
 * validates the Catalog's answers with, so that a read's ETag names it in If-Match (D29).
 */
export function catalogEtag(namespace: NamespaceState, catalog: CatalogState): string {
  return representationTag(namespace.catalogTag(catalog.row));
}

/** The ETag of one Resource as a writer sees it: its version tag, as its reads validate it (D29). */
export function resourceEtagOf(resource: ResourceState): string {
  return representationTag(resourceTag(resource.row, resource.currentVersion));
}

/**
 * Publishing over HTTP (D23): an account writes its own Catalogs with the model of `playbook import`,
 * through the same planner, one transaction per write.
 */
export class PublishService {
  private readonly now: () => string;
  private readonly metrics: Metrics;

  constructor(
    private readonly deps: CatalogWriteDeps & { readonly writes: UnitOfWork },
    private readonly options: PublishOptions,
  ) {
    this.now = options.now ?? (() => new Date().toISOString());
    this.metrics = deps.metrics ?? new Metrics();
  }

  /** `PUT /v3/playbook/catalogs/org/{catalogSlug}`: the whole Catalog, declaratively. */
  async putCatalog(
    context: WriteContext,
    slug: string,
    body: PutCatalogBody,
    dryRun: boolean,
  ): Promise<WriteAnswer<PublishAnswer>> {
    const accountId = writerAccount(context.principal, slug);
    const problems: InputProblem[] = [];
    const seen = new Map<string, number>();
    const interned = new Interned();
    const spool = new BodySpool();
    const resources: BodyResource[] = [];
    // The body's Resources are taken one by one and let go: what is kept of each is its BodyResource.
    const specs: (PublishedResource | undefined)[] = body.resources;
    for (let index = 0; index < specs.length; index++) {
      const spec = specs[index]!;
      specs[index] = undefined;
      const at = `resources[${index}]`;
      const first = seen.get(spec.slug);
      if (first !== undefined) {
        problems.push({ in: 'body', name: `${at}.slug`, message: `is also the slug of resources[${first}]` });
      }
      seen.set(spec.slug, index);
      this.checkContent(spec, at, problems);
      if (problems.length > MAX_LISTED_PROBLEMS) throw new InputError(problems, true);
      resources.push(new BodyResource(spec.slug, index, spec, interned, spool));
      // Digests of 100,000 contents and manifests are seconds of work (D20).
      await yieldIfBusy();
    }
    if (problems.length > 0) throw new InputError(problems);
    resources.sort(byText((resource) => resource.slug));
    const catalog: CatalogInput = {
      slug,
      origin: '',
      name: body.name,
      version: body.version,
      status: body.status ?? 'active',
      ...(body.description === undefined ? {} : { description: body.description }),
      ...(body.facets === undefined ? {} : { facets: body.facets }),
      resources,
    };
    let existed = false;
    let stored: CatalogSummary | undefined;
    const applied = await this.apply(
      context,
      accountId,
      catalog,
      dryRun,
      'publish-catalog',
      (state) => {
        existed = state.catalogs.has(slug);
        return checkPreconditions(context, { catalogSlug: slug }, state);
      },
      async (db) => {
        stored = await this.catalogSummary(accountId, slug, db);
      },
    );
    // A write that changed nothing opened no transaction: what is stored is read now.
    stored ??= dryRun && !existed ? undefined : await this.catalogSummary(accountId, slug);
    return {
      status: existed || dryRun ? 200 : 201,
      body: {
        ...(stored ? { catalog: withStoredPins(this.deps.db, stored.catalog) } : {}),
        changes: changesOf(applied.report.counts),
        dryRun,
        lines: applied.report.lines,
      },
      ...(stored && !dryRun ? { etag: stored.etag } : {}),
    };
  }

  /** `PUT …/catalogs/org/{catalogSlug}/resources/{resourceSlug}`: one Resource of an existing Catalog. */
  async putResource(
    context: WriteContext,
    catalogSlug: string,
    resourceSlug: string,
    body: PutResourceBody,
  ): Promise<WriteAnswer<ResourceWrite>> {
    const accountId = writerAccount(context.principal, catalogSlug);
    const problems: InputProblem[] = [];
    this.checkContent(body, '', problems);
    if (problems.length > 0) throw new InputError(problems);
    const { catalog: current } = await this.catalogState(accountId, catalogSlug);
    const catalog: CatalogInput = {
      slug: catalogSlug,
      origin: '',
      name: current.row.name,
      version: '',
      status: current.row.status,
      resources: [new BodyResource(resourceSlug, -1, body)],
      resourcesOnly: true,
    };
    let existed = false;
    let stored: StoredCatalog | undefined;
    const applied = await this.apply(
      context,
      accountId,
      catalog,
      false,
      'publish-resource',
      (state) => {
        existed = state.catalogs.get(catalogSlug)?.resources.has(resourceSlug) === true;
        return checkPreconditions(context, { catalogSlug, resourceSlug }, state);
      },
      async (db) => {
        stored = await this.storedCatalog(accountId, catalogSlug, db);
      },
    );
    stored ??= await this.storedCatalog(accountId, catalogSlug);
    const resource = stored.state.resources.get(resourceSlug)!;
    const { row } = resource;
    return {
      status: existed ? 200 : 201,
      body: {
        catalog: stored.catalog,
        resource: { slug: row.slug, id: row.id, currentVersionId: row.current_version_id },
        changes: changesOf(applied.report.counts),
      },
      etag: resourceEtagOf(resource),
    };
  }

  /**
   * `POST …/catalogs/org/{catalogSlug}/versions`: a Catalog version pinning the current versions of
   * the active Resources. The same label over the same pins replays (200); over others, 409.
   */
  publishVersion(context: WriteContext, catalogSlug: string, label: string): Promise<WriteAnswer<Catalog>> {
    return countedWrite(
      this.metrics,
      'publish',
      () => this.publishVersionOnce(context, catalogSlug, label),
      (answer) => (answer.status === 201 ? 'changed' : 'unchanged'),
    );
  }

  private async publishVersionOnce(
    context: WriteContext,
    catalogSlug: string,
    label: string,
  ): Promise<WriteAnswer<Catalog>> {
    const accountId = writerAccount(context.principal, catalogSlug);
    const { created, stored } = await this.deps.writes.run(
      'publish-version',
      writerOf(context),
      async (write) => {
        const { db: trx } = write;
        const at = write.context.at;
        const { namespace, catalog: state } = await this.catalogState(accountId, catalogSlug, trx);
        await checkPreconditions(context, { catalogSlug }, namespace);
        const sources: PinSource[] = [];
        // CatalogPins puts the pins in slug order itself.
        for (const [slug, resource] of state.resources) {
          const version = resource.currentVersion;
          if (resource.row.status !== 'active' || !version) continue;
          sources.push({
            resourceId: resource.row.id,
            slug,
            versionId: version.id,
            version: version.version,
            contentHash: version.content_hash,
          });
        }
        const pins = new CatalogPins('org', catalogSlug, sources);
        const manifestHash = await manifestHashOf(pins);
        // The state read above holds every label of the Catalog: only a used one is looked up.
        const same = state.labels.has(label)
          ? await trx
              .selectFrom('catalog_versions')
              .select(['manifest_hash'])
              .where('catalog_id', '=', state.row.id)
              .where('version', '=', label)
              .executeTakeFirst()
          : undefined;
        if (same) {
          if (same.manifest_hash === manifestHash) {
            return { created: false, stored: await this.storedCatalog(accountId, catalogSlug, trx) };
          }
          throw new ConflictError(
            `version "${label}" already names other pins of this catalog; choose a new version label`,
            'version_label_taken',
          );
        }
        const id = v7();
        await trx
          .insertInto('catalog_versions')
          .values({
            id,
            catalog_id: state.row.id,
            version: label,
            manifest_hash: manifestHash,
            resource_count: pins.count,
            published_at: at,
            created_at: at,
          })
          .execute();
        await writeStoredPins(trx, id, pins.jsonSlices());
        await trx
          .updateTable('catalogs')
          .set({ current_version_id: id, updated_at: at })
          .where('id', '=', state.row.id)
          .execute();
        await write.append([
          {
            namespace: accountId,
            type: 'catalog.version_published',
            target: { kind: 'catalog', id: state.row.id, humanRef: `org/${catalogSlug}` },
            summary: `catalog version org/${catalogSlug} ${label}: ${pins.count} pins`,
          },
        ]);
        return { created: true, stored: await this.storedCatalog(accountId, catalogSlug, trx) };
      },
    );
    return { status: created ? 201 : 200, body: stored.catalog, etag: stored.etag };
  }

  /** `DELETE …/catalogs/org/{catalogSlug}`: archives the Catalog; idempotent. */
  async archiveCatalog(context: WriteContext, catalogSlug: string): Promise<void> {
    await this.archive(context, catalogSlug, undefined);
  }

  /** `DELETE …/catalogs/org/{catalogSlug}/resources/{resourceSlug}`: archives the Resource; idempotent. */
  async archiveResource(context: WriteContext, catalogSlug: string, resourceSlug: string): Promise<void> {
    await this.archive(context, catalogSlug, resourceSlug);
  }

  private async archive(
    context: WriteContext,
    catalogSlug: string,
    resourceSlug: string | undefined,
  ): Promise<void> {
    await countedWrite(
      this.metrics,
      'publish',
      () => this.archiveOnce(context, catalogSlug, resourceSlug),
      (changed) => (changed ? 'changed' : 'unchanged'),
    );
  }

  private async archiveOnce(
    context: WriteContext,
    catalogSlug: string,
    resourceSlug: string | undefined,
  ): Promise<boolean> {
    const accountId = writerAccount(context.principal, catalogSlug);
    return this.deps.writes.run('archive', writerOf(context), async (write: WriteScope) => {
      const { db: trx } = write;
      const at = write.context.at;
      const { namespace, catalog: state } = await this.catalogState(accountId, catalogSlug, trx);
      const resource = resourceSlug === undefined ? undefined : state.resources.get(resourceSlug);
      if (resourceSlug !== undefined && !resource) throw new NotFoundError('no such resource');
      await checkPreconditions(
        context,
        resourceSlug === undefined ? { catalogSlug } : { catalogSlug, resourceSlug },
        namespace,
      );
      const table = resource ? 'resources' : 'catalogs';
      const row = resource ? resource.row : state.row;
      if (row.status === 'archived') return false;
      await trx
        .updateTable(table)
        .set({ status: 'archived', archived_at: at, updated_at: at })
        .where('id', '=', row.id)
        .execute();
      const humanRef = resource ? `org/${catalogSlug}/${resourceSlug}` : `org/${catalogSlug}`;
      await write.append([
        {
          namespace: accountId,
          type: resource ? 'resource.archived' : 'catalog.archived',
          target: { kind: resource ? 'resource' : 'catalog', id: row.id, humanRef },
          summary: `${resource ? 'resource' : 'catalog'} ${humanRef} archived`,
        },
      ]);
      return true;
    });
  }

  /**
   * What the schema cannot say of a Resource's body: its content's size in bytes, content with no
   * UTF-8 form (a lone surrogate, which storing would turn into U+FFFD under the hash of other bytes),
   * and a manifest too large to digest in one go (D20).
   */
  private checkContent(
    spec: { content: string; manifest?: unknown },
    at: string,
    problems: InputProblem[],
  ): void {
    const name = at === '' ? 'content' : `${at}.content`;
    const size = utf8Size(spec.content);
    if (size > this.options.maxContentBytes) {
      problems.push({ in: 'body', name, message: tooLarge(size, this.options.maxContentBytes) });
    }
    if (!wellFormed(spec.content)) {
      problems.push({ in: 'body', name, message: 'must not hold unpaired surrogates' });
    }
    if (!holdsAtMost(spec.manifest, MAX_MANIFEST_VALUES)) {
      problems.push({
        in: 'body',
        name: at === '' ? 'manifest' : `${at}.manifest`,
        message: `holds more than ${MAX_MANIFEST_VALUES} keys and values; a manifest describes its Resource`,
      });
    }
  }

  private async apply(
    context: WriteContext,
    accountId: string,
    catalog: CatalogInput,
    dryRun: boolean,
    write: 'publish-catalog' | 'publish-resource',
    precondition: (state: NamespaceState) => Promise<void>,
    readBack: (db: Db) => Promise<void>,
  ) {
    const options: ApplyOptions = {
      via: 'publish',
      write,
      writer: writerOf(context),
      owner: { kind: 'account', accountId },
      dryRun,
      now: this.now,
      precondition,
      readBack,
    };
    try {
      return await applyCatalogs(
        this.deps,
        { catalogs: [catalog], resourceFileCount: catalog.resources.length },
        options,
      );
    } catch (error) {
      if (error instanceof ImportValidationError && error.kind === 'immutable') {
        // Said in the body's terms: the JSON path of the field at fault.
        const problems: InputProblem[] = error.refusals.map((refusal) => ({
          in: 'body',
          name: refusal.origin === '' ? refusal.field : `${refusal.origin}.${refusal.field}`,
          message: refusal.message,
        }));
        const detail = problems.map((problem) => `${problem.name}: ${problem.message}`).join('; ');
        throw new ConflictError(detail, 'version_label_taken', problems);
      }
      throw error;
    }
  }

  /** The account's Catalog `slug`, which must exist, with the state of the namespace that tags it. */
  private async catalogState(accountId: string, slug: string, db: Db = this.deps.db): Promise<OneCatalog> {
    const namespace = await loadNamespaceState(db, { kind: 'account', accountId }, [slug]);
    const catalog = namespace.catalogs.get(slug);
    if (!catalog) throw new NotFoundError('no such catalog');
    return { namespace, catalog };
  }

  /**
   * The Catalog as `db` sees it now with its pins left in storage (`withStoredPins` reads them: a
   * version's pins never change), and its ETag, which reads no Resource: what a whole Catalog's publish answers
   * with holds no Resource's state and no pin, whatever the Catalog's size (D30).
   */
  private async catalogSummary(
    accountId: string,
    slug: string,
    db: Db = this.deps.db,
  ): Promise<CatalogSummary> {
    const row = await db
      .selectFrom('catalogs')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('slug', '=', slug)
      .executeTakeFirst();
    if (!row) throw new NotFoundError('no such catalog');
    const version = row.current_version_id
      ? await db
          .selectFrom('catalog_versions')
          .select(['id', 'version', 'manifest_hash', 'resource_count', 'published_at'])
          .where('id', '=', row.current_version_id)
          .executeTakeFirst()
      : undefined;
    const tagOf = await readCatalogTagger(db, accountId);
    return {
      catalog: toCatalog(row, version),
      etag: representationTag(tagOf(row)),
    };
  }

  /**
   * The Catalog as `db` sees it now, and its ETag: read in the write's transaction, so that the ETag a
   * write answers with is of that write, never of a later one by someone else.
   */
  private async storedCatalog(
    accountId: string,
    slug: string,
    db: Db = this.deps.db,
  ): Promise<StoredCatalog> {
    const { namespace, catalog: state } = await this.catalogState(accountId, slug, db);
    const version = state.row.current_version_id
      ? await db
          .selectFrom('catalog_versions')
          .select(['id', 'version', 'manifest_hash', 'resource_count', 'published_at'])
          .where('id', '=', state.row.current_version_id)
          .executeTakeFirst()
      : undefined;
    // The pins of a large Catalog are megabytes of JSON: stored apart, read a part at a time (D20).
    const catalog = toCatalog(state.row, version, version && (await readStoredPins(db, version.id)));
    const etag = catalogEtag(namespace, state);
    return { state, catalog, etag };
  }
}

/** One Catalog's state, and the state of its namespace, which tags it. */
interface OneCatalog {
  readonly namespace: NamespaceState;
  readonly catalog: CatalogState;
}

/** A Catalog as stored, its pins left in storage, and its ETag. */
interface CatalogSummary {
  readonly catalog: Catalog;
  readonly etag: string;
}

/** A Catalog as stored: its state, its API shape and its ETag. */
interface StoredCatalog {
  readonly state: CatalogState;
  readonly catalog: Catalog;
  readonly etag: string;
}

/**
 * `catalog`, its current version's pins left empty, with those pins as their stored text, which `db`
 * reads as the answer is written: a version's pins never change, so they are read after the commit.
 */
function withStoredPins(db: Db, catalog: Catalog): CatalogWithStoredPins {
  const { currentVersion, ...rest } = catalog;
  if (!currentVersion) return rest;
  // Replaced in place, so that the pins keep their place among the version's fields.
  const resourcePins = new RawJsonParts(storedPinsText(db, currentVersion.id));
  return { ...catalog, currentVersion: { ...currentVersion, resourcePins } };
}

/**
 * The account a write acts for: `org` is always the caller's own (D5, D23). A Catalog outside the
 * Catalogs a key is restricted to (D32) is written as it is read: it is not there (404).
 */
function writerAccount(principal: Principal, catalogSlug: string): string {
  if (principal.accountId === null) {
    throw new ForbiddenError('publishing needs an account: this credential acts for none');
  }
  if (!catalogRefAdmitted(principal, 'org', catalogSlug)) throw new NotFoundError('no such catalog');
  return principal.accountId;
}

function actorOf(principal: Principal): ChangeActor {
  const { credential } = principal;
  return credential.kind === 'api-key'
    ? { type: 'api-key', id: credential.keyId }
    : { type: 'user', id: credential.subject };
}

function writerOf(context: WriteContext): Writer {
  return { actor: actorOf(context.principal), requestId: context.requestId };
}

/** What a write's preconditions are checked against: the Catalog, or one of its Resources. */
interface WriteTarget {
  readonly catalogSlug: string;
  /** The Resource a one-Resource write names; absent for a write of the Catalog. */
  readonly resourceSlug?: string;
}

/** The read that answers the object a write names, with the ETag that its If-Match takes (D29). */
function readPathOf(target: WriteTarget): string {
  const catalog = `/v3/playbook/catalogs/org/${target.catalogSlug}`;
  return target.resourceSlug === undefined ? catalog : `${catalog}/resources/${target.resourceSlug}`;
}

/**
 * `If-Match` and `If-None-Match` against what is stored (D23): the object's ETag is the Catalog's, or
 * the Resource's for a one-Resource write, in any of its encodings (D29). A refusal says where to read
 * the object again, to send its current ETag.
 */
async function checkPreconditions(
  context: WriteContext,
  target: WriteTarget,
  namespace: NamespaceState,
): Promise<void> {
  if (context.ifNoneMatch === undefined && context.ifMatch === undefined) return;
  const catalog = namespace.catalogs.get(target.catalogSlug);
  const resource =
    target.resourceSlug === undefined ? undefined : catalog?.resources.get(target.resourceSlug);
  const exists = target.resourceSlug === undefined ? catalog !== undefined : resource !== undefined;
  const current = () =>
    target.resourceSlug === undefined
      ? catalog && catalogEtag(namespace, catalog)
      : resource && resourceEtagOf(resource);
  const what = target.resourceSlug === undefined ? 'catalog' : 'resource';
  const read = `GET ${readPathOf(target)}`;
  if (context.ifNoneMatch !== undefined) {
    if (createOnly(context.ifNoneMatch)) {
      if (exists) {
        throw new PreconditionFailedError(
          `If-None-Match: * asks to create, and this ${what} already exists. To replace it, read it with ${read} and send its ETag in If-Match.`,
        );
      }
    } else {
      // RFC 9110 §13.1.2: the write goes ahead only if no listed tag names what is there now.
      const etag = current();
      if (etag !== undefined && noneMatchNamesState(context.ifNoneMatch, etag)) {
        throw new PreconditionFailedError(
          `If-None-Match names the current ETag of this ${what}: the write goes ahead only if it does not.`,
        );
      }
    }
  }
  if (context.ifMatch !== undefined && !matchHolds(context.ifMatch, current())) {
    throw new PreconditionFailedError(
      exists
        ? `If-Match does not name the current ETag of this ${what} (a weak ETag never does): it changed since it was read. Read it again with ${read} and send the ETag of that answer.`
        : `If-Match names a ${what} that does not exist (${readPathOf(target)}): leave If-Match out to create it.`,
    );
  }
}

function changesOf(counts: ImportCounts): PublishChanges {
  return {
    created: counts.resourcesCreated,
    updated: counts.resourcesUpdated,
    superseded: counts.resourceVersionsSuperseded,
    archived: counts.resourcesArchived,
    unchanged: counts.resourcesUnchanged,
  };
}

export type { PublishedResource };
