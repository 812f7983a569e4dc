import { readNamespaceSeq, SERVICE_NAMESPACE } from '../changes/change-log.js';
import { UnitOfWork, type WriteName, type Writer } from '../changes/unit-of-work.js';
import type { ContentStore } from '../content/content-store.js';
import type { Db } from '../db/tables.js';
import { ConflictError, PreconditionFailedError } from '../foundation/errors.js';
import { yieldIfBusy } from '../foundation/pace.js';
import { Metrics, secondsSince } from '../observability/metrics.js';
import type { CatalogInputs } from './catalog-input.js';
import { type ImportOwner, loadNamespaceState, type NamespaceState } from './namespace-state.js';
import { type ImportPlan, planImport, planIsEmpty } from './plan.js';
import { ImportValidationError, refusalLine } from './refusals.js';
import { type ImportReport, type ReportLines, summarize } from './report.js';
import { storeObjects, writePlan } from './write-plan.js';

export interface CatalogWriteDeps {
  readonly db: Db;
  /** Where `object-storage` content goes; `database-text` content goes through the transaction. */
  readonly objectStore: ContentStore;
  /** The one way writes reach the database; by default one that announces nothing (a test's). */
  readonly writes?: UnitOfWork;
  /** Where writes are counted and timed (D25). */
  readonly metrics?: Metrics;
}

export interface ApplyOptions {
  readonly owner: ImportOwner;
  readonly dryRun?: boolean;
  readonly onProgress?: (line: string) => void;
  readonly now?: () => string;
  /**
   * Checked against what is stored, first when planning and again inside the transaction: throwing
   * refuses the change with nothing written (D23's `If-Match`).
   */
  readonly precondition?: (state: NamespaceState) => void | Promise<void>;
  /** The way in, for the metrics: `playbook import` (the default) or publishing over HTTP. */
  readonly via?: 'import' | 'publish';
  /** The write, as the unit of work names it; `import` by default. */
  readonly write?: WriteName;
  /** Who writes: an operator (the command line) by default. */
  readonly writer?: Writer;
  /** Runs in the transaction once the plan is written: what the write answers with is read there. */
  readonly readBack?: (db: Db) => Promise<void>;
}

/** What was applied: the report, the plan, and the stored state it was planned against. */
export interface Applied {
  readonly report: ImportReport;
  readonly plan: ImportPlan;
}

/**
 * Plans a validated tree against what is stored and applies it in one transaction (D15, D23): the
 * model both doors share, `playbook import` (a tree of folders) and publishing over HTTP (one
 * Catalog in a request). Objects are stored before the transaction; if it does not commit, the objects
 * this call stored and no committed version names are removed again.
 */
export function applyCatalogs(
  deps: CatalogWriteDeps,
  tree: CatalogInputs,
  options: ApplyOptions,
): Promise<Applied> {
  return countedWrite(
    deps.metrics ?? new Metrics(),
    options.via ?? 'import',
    () => applyCatalogsOnce(deps, tree, options),
    ({ report }) => (report.dryRun ? 'dry_run' : report.changed ? 'changed' : 'unchanged'),
  );
}

/**
 * Runs one import or publication, counting it by outcome and timing it for the metrics (D25): a write
 * that throws is `refused` when the caller has something to fix, else `failed`.
 */
export async function countedWrite<T>(
  metrics: Metrics,
  via: 'import' | 'publish',
  write: () => Promise<T>,
  outcomeOf: (result: T) => 'changed' | 'unchanged' | 'dry_run',
): Promise<T> {
  const started = performance.now();
  try {
    const result = await write();
    metrics.catalogWrites.inc({ via, outcome: outcomeOf(result) });
    return result;
  } catch (error) {
    metrics.catalogWrites.inc({ via, outcome: writeOutcome(error) });
    throw error;
  } finally {
    metrics.catalogWriteDuration.observe({ via }, secondsSince(started));
  }
}

/** How a write that threw ended, for the metrics: refused (the caller's to fix) or failed. */
function writeOutcome(error: unknown): 'refused' | 'failed' {
  return error instanceof ImportValidationError ||
    error instanceof PreconditionFailedError ||
    error instanceof ConflictError
    ? 'refused'
    : 'failed';
}

async function applyCatalogsOnce(
  deps: CatalogWriteDeps,
  tree: CatalogInputs,
  options: ApplyOptions,
): Promise<Applied> {
  const { owner, onProgress } = options;
  const slugs = tree.catalogs.map((catalog) => catalog.slug);
  const planOptions = { owner, now: (options.now ?? (() => new Date().toISOString()))() };
  const stateOf = async (db: Db) => {
    const state = await loadNamespaceState(db, owner, slugs);
    await options.precondition?.(state);
    return state;
  };

  // Everything a plan reads is of its owner's namespace, and every write to it appends a change there.
  const namespace = owner.kind === 'svc' ? SERVICE_NAMESPACE : owner.accountId;
  const lastChange = (db: Db) => readNamespaceSeq(db, namespace);
  // Planned first outside any transaction, so that an unchanged tree or a dry run opens no write.
  const plannedAt = await lastChange(deps.db);
  const preview = await planImport(tree, await stateOf(deps.db), planOptions);
  if (preview.refusals.length > 0) throw refused(preview);
  // The state is read a page at a time, so a write that committed meanwhile may show in part: an
  // empty plan is trusted only if nothing was written to the namespace since it began (else the
  // transaction plans).
  if (options.dryRun || (planIsEmpty(preview) && (await lastChange(deps.db)) === plannedAt)) {
    return { report: await reportOf(preview, options.dryRun === true), plan: preview };
  }

  const stored = new Set<string>();
  const created = new Set<string>();
  const writes = deps.writes ?? new UnitOfWork(deps.db);
  const writer: Writer = { ...(options.writer ?? { actor: { type: 'operator' } }), at: planOptions.now };
  try {
    await storeObjects(deps.objectStore, preview, stored, onProgress, created);
    // What commits must match what storage holds at commit, even if something else wrote meanwhile:
    // the transaction plans again, unless the namespace's last change says nothing did (every write
    // appends to it), and then the preview, and the precondition checked on its state, stand (a plan
    // of 100,000 Resources is not small to make twice). Writes to other namespaces do not count.
    // Objects a new plan did not foresee are stored here. A conflict with a concurrent writer runs
    // this again (the unit of work), planning against what that writer committed.
    const applied = await writes.run(
      options.write ?? 'import',
      writer,
      async (write) => {
        const unchanged = (await lastChange(write.db)) === plannedAt;
        const plan = unchanged ? preview : await planImport(tree, await stateOf(write.db), planOptions);
        if (plan.refusals.length > 0) throw refused(plan);
        if (planIsEmpty(plan)) return plan;
        await storeObjects(deps.objectStore, plan, stored, onProgress, created);
        await writePlan(write, plan, onProgress);
        await options.readBack?.(write.db);
        return plan;
      },
      (attempt) => onProgress?.(`storage changed during the import; planning again (attempt ${attempt})`),
    );
    return { report: await reportOf(applied, false), plan: applied };
  } catch (error) {
    await removeUnnamed(deps, created);
    throw error;
  }
}

/** A plan's refusals, as the error both doors catch: lines for the command line, and the refusals. */
function refused(plan: ImportPlan): ImportValidationError {
  return new ImportValidationError(plan.refusals.map(refusalLine), 'immutable', plan.refusals);
}

/**
 * Removes objects a failed write stored, unless a committed version names them (a concurrent writer
 * of the same content may have committed meanwhile): a failed write leaves the store as it was.
 */
async function removeUnnamed(deps: CatalogWriteDeps, created: ReadonlySet<string>): Promise<void> {
  for (const hash of created) {
    try {
      const named = await deps.db
        .selectFrom('resource_versions')
        .select('id')
        .where('content_hash', '=', hash)
        .where('storage_backend', '=', 'object-storage')
        .executeTakeFirst();
      if (!named) await deps.objectStore.delete(hash);
    } catch {
      // The store or database that failed the write may fail this too: the object then stays,
      // unreferenced, which content addressing makes harmless.
    }
  }
}

/** The report of a plan: its lines are made from the plan as they are read (D20, D30). */
async function reportOf(plan: ImportPlan, dryRun: boolean): Promise<ImportReport> {
  const objects = new Set<string>();
  for (const version of plan.newVersions) {
    if (version.storageBackend === 'object-storage') objects.add(version.contentHash);
    await yieldIfBusy();
  }
  const counts = { ...plan.counts, objectsStored: objects.size };
  return {
    dryRun,
    changed: !planIsEmpty(plan),
    lines: new PlannedLines(plan.lines),
    counts,
    summary: summarize(counts, dryRun),
  };
}

/** A plan's report lines, each made when it is read. */
class PlannedLines implements ReportLines {
  constructor(private readonly planned: ImportPlan['lines']) {}

  get length(): number {
    return this.planned.length;
  }

  *[Symbol.iterator](): Iterator<string> {
    for (const line of this.planned) yield typeof line === 'string' ? line : line.line();
  }
}
