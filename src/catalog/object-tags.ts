import { createHash } from 'node:crypto';
import { readCatalogChangeSeq } from '../changes/change-log.js';
import type { CatalogRow, Db, ResourceRow, ResourceVersionRow } from '../db/tables.js';

/**
 * The version tags of the objects a write can name (D23, D29): a Catalog and a Resource. One tag
 * stands for one stored state of the object, whoever computes it: the read side makes it the
 * validator of the object's answers (their `ETag`, one per content encoding, each derived from this
 * tag), and a write compares `If-Match` with it. So an `ETag` read in any encoding is a valid
 * `If-Match` for a write of the same object, and the `ETag` a write answers with revalidates a read.
 *
 * A tag digests every stored field its object's answers are made of (a content hash stands for the
 * content), so that it is a strong validator of those answers. `FORM` is digested too: when what an
 * answer shows of the same stored state changes, changing it makes every tag new, so that no client
 * revalidates an answer of the former form.
 */
const FORM = '1';

/** What a Resource's tag is made of: its row, and its current version's row. */
export type ResourceTagRow = Pick<
  ResourceRow,
  | 'id'
  | 'slug'
  | 'kind'
  | 'title'
  | 'status'
  | 'description'
  | 'facets'
  | 'manifest'
  | 'current_version_id'
  | 'updated_at'
  | 'archived_at'
>;
/** What of a Resource Version can change: its status and the times that go with it. */
export type VersionTagRow = Pick<
  ResourceVersionRow,
  'id' | 'status' | 'published_at' | 'superseded_at' | 'archived_at'
>;
/** What a Catalog's tag is made of: its row. */
export type CatalogTagRow = Pick<
  CatalogRow,
  | 'id'
  | 'slug'
  | 'name'
  | 'status'
  | 'description'
  | 'facets'
  | 'current_version_id'
  | 'updated_at'
  | 'archived_at'
>;
/** Fields joined unambiguously: a separator no stored text holds, and null apart from ''. */
function fields(values: readonly (string | null)[]): string {
  return values.map((value) => (value === null ? '\u0001' : value)).join('\0');
}

function tagOf(kind: 'c' | 'r', digest: ReturnType<typeof createHash>): string {
  return `${kind}${digest.digest('base64url').slice(0, 32)}`;
}

/**
 * The tag of a Resource: of its row and its current version (which the Resource's detail shows).
 *
 * @example
 * resourceTag(row, currentVersion); // 'r' and 32 base64url characters
 */
export function resourceTag(resource: ResourceTagRow, version: VersionTagRow | undefined): string {
  const digest = createHash('sha256').update(`${FORM}\0r\n`);
  digest.update(
    fields([
      resource.id,
      resource.slug,
      resource.kind,
      resource.title,
      resource.status,
      resource.description,
      resource.facets,
      resource.current_version_id,
      resource.updated_at,
      resource.archived_at,
    ]),
  );
  digest.update('\n');
  digest.update(
    version === undefined
      ? ''
      : fields([
          version.id,
          version.status,
          version.published_at,
          version.superseded_at,
          version.archived_at,
        ]),
  );
  digest.update('\n');
  digest.update(resource.manifest);
  return tagOf('r', digest);
}

/**
 * The tag of a Catalog: of its row, and of the last change to any Catalog or Resource of its namespace
 * (`seq` of the change log, D26), so that a write to any of its Resources (which a whole Catalog's
 * write would replace) changes it too, and yet no Resource is read to make it (a Catalog may hold
 * 100,000, D30). The Catalog's current version is named by its row; its pins never change. A write to
 * another Catalog of the same namespace changes it as well: a tag may change when nothing it stands for
 * did (a read answers 200 where it could have answered 304), never stay when something did.
 *
 * @param changeSeq what `readCatalogChangeSeq` reads for the Catalog's namespace (`readCatalogTagger`)
 * @example
 * catalogTag(row, 1042); // 'c' and 32 base64url characters
 */
export function catalogTag(catalog: CatalogTagRow, changeSeq: number): string {
  const digest = createHash('sha256').update(`${FORM}\0c\n`);
  digest.update(
    fields([
      catalog.id,
      catalog.slug,
      catalog.name,
      catalog.status,
      catalog.description,
      catalog.facets,
      catalog.current_version_id,
      catalog.updated_at,
      catalog.archived_at,
    ]),
  );
  digest.update(`\n#${changeSeq}`);
  return tagOf('c', digest);
}

/** Tags Catalogs of one namespace, as of the read that made it (`readCatalogTagger`). */
export type CatalogTagger = (catalog: CatalogTagRow) => string;

/**
 * What tags the Catalogs of `namespace` whose rows `db` has read: the last change it names is read
 * now, after those rows (through the same transaction, where they were read in one), so that it is at
 * least as recent as what each row shows. A tag that named a change older than its row could stay
 * while a Resource changed. Catalogs read together share the one read: the change is the namespace's.
 *
 * @example
 * const row = await findCatalog(db, …);
 * const tag = (await readCatalogTagger(db, namespaceOf(row.account_id)))(row);
 */
export async function readCatalogTagger(db: Db, namespace: string): Promise<CatalogTagger> {
  const changeSeq = await readCatalogChangeSeq(db, namespace);
  return (catalog) => catalogTag(catalog, changeSeq);
}
