import { applyCatalogs, type CatalogWriteDeps } from '../catalog-writes/apply.js';
import type { ImportOwner } from '../catalog-writes/namespace-state.js';
import { ImportValidationError } from '../catalog-writes/refusals.js';
import type { ImportReport } from '../catalog-writes/report.js';
import { Metrics } from '../observability/metrics.js';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';
import { readImportTree } from './read-tree.js';

export type { ImportOwner } from '../catalog-writes/namespace-state.js';
export { ImportValidationError } from '../catalog-writes/refusals.js';
export type { ImportCounts, ImportReport } from '../catalog-writes/report.js';

export interface ImportOptions {
  /** The tree: one folder per Catalog (D15). */
  readonly dir: string;
  readonly owner: ImportOwner;
  /** Validate and plan, report what would change, write nothing. */
  readonly dryRun?: boolean;
  /** Progress lines for large trees, every thousand files validated or rows written. */
  readonly onProgress?: (line: string) => void;
  /** The timestamp every change carries; the clock by default. */
  readonly now?: () => string;
  /** D20: the most bytes of content one Resource Version may have; 16 MiB by default. */
  readonly maxContentBytes?: number;
  /** D20: the most Resources one Catalog may hold; 100,000 by default (tests lower it). */
  readonly maxCatalogResources?: number;
}

/**
 * Imports a tree of Catalogs and Resources into one owner's namespace (D15).
 *
 * Every file is validated before anything is written; invalid files, and changes that would rewrite
 * an immutable version label, throw {@link ImportValidationError} listing every problem, with storage
 * untouched. Otherwise the changes are applied in one database transaction, `object-storage` content
 * having been stored before it commits. Re-importing an unchanged tree writes nothing at all. Catalog
 * folders absent from the tree are left as they are: a tree may cover only some of an owner's Catalogs.
 *
 * @example
 * const report = await importTree(
 *   { db: services.databases.primary, objectStore: services.objectStore },
 *   { dir: 'demo/catalogs', owner: { kind: 'svc' } },
 * );
 * for (const line of report.lines) console.log(line);
 * console.log(report.summary);
 */
export async function importTree(deps: ImportDeps, options: ImportOptions): Promise<ImportReport> {
  const { owner, onProgress } = options;
  const problems: string[] = [];
  if (owner.kind === 'account' && !ACCOUNT_ID_PATTERN.test(owner.accountId)) {
    problems.push(
      `account ${JSON.stringify(owner.accountId)}: must be 1-128 characters of letters, digits, ".", "_", ":" or "-", and not svc (the service's own)`,
    );
  }
  const { maxContentBytes, maxCatalogResources } = options;
  const reading = await readImportTree(options.dir, onProgress, {
    ...(maxContentBytes === undefined ? {} : { maxContentBytes }),
    ...(maxCatalogResources === undefined ? {} : { maxCatalogResources }),
  });
  if (!reading.ok) problems.push(...reading.problems);
  if (problems.length > 0 || !reading.ok) {
    (deps.metrics ?? new Metrics()).catalogWrites.inc({ via: 'import', outcome: 'refused' });
    throw new ImportValidationError(problems);
  }

  return (await applyCatalogs(deps, reading.tree, options)).report;
}

/** What an import writes with: the database, the object store, the unit of work. */
export type ImportDeps = CatalogWriteDeps;
