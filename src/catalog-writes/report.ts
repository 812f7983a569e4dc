/** How many things an import changed, or would change in a dry run. */
export interface ImportCounts {
  readonly catalogsRead: number;
  readonly resourceFilesRead: number;
  readonly accountsCreated: number;
  readonly catalogsCreated: number;
  readonly catalogsUpdated: number;
  readonly catalogVersionsPublished: number;
  readonly resourcesCreated: number;
  readonly resourcesUpdated: number;
  readonly resourcesArchived: number;
  readonly resourcesUnchanged: number;
  readonly resourceVersionsCreated: number;
  readonly resourceVersionsSuperseded: number;
  /** Draft versions published in place because their Resource left `draft`. */
  readonly resourceVersionsPublished: number;
  /** Distinct contents written to the object store. */
  readonly objectsStored: number;
}

export type MutableCounts = { -readonly [K in keyof ImportCounts]: ImportCounts[K] };

export function emptyCounts(): MutableCounts {
  return {
    catalogsRead: 0,
    resourceFilesRead: 0,
    accountsCreated: 0,
    catalogsCreated: 0,
    catalogsUpdated: 0,
    catalogVersionsPublished: 0,
    resourcesCreated: 0,
    resourcesUpdated: 0,
    resourcesArchived: 0,
    resourcesUnchanged: 0,
    resourceVersionsCreated: 0,
    resourceVersionsSuperseded: 0,
    resourceVersionsPublished: 0,
    objectsStored: 0,
  };
}

/** The lines of a report: read in order, as often as wanted, each made as it is read. */
export interface ReportLines extends Iterable<string> {
  readonly length: number;
}

/** What an import did (or, for a dry run, would do). */
export interface ImportReport {
  readonly dryRun: boolean;
  /** False when storage already matched the tree; then nothing was written. */
  readonly changed: boolean;
  /**
   * One human-readable line per change, in tree order, each made when it is read: the lines of
   * 100,000 new Resources are never all held at once (D30).
   */
  readonly lines: ReportLines;
  readonly counts: ImportCounts;
  /** One line that sums the counts up. */
  readonly summary: string;
}

/**
 * One line that sums up `counts`.
 *
 * @example
 * summarize(counts, false); // 'import: created 3 catalogs, 24 resources, 24 resource versions; published 3 catalog versions (read 3 catalogs, 24 resource files)'
 */
export function summarize(counts: ImportCounts, dryRun: boolean): string {
  const groups: [string, [number, string][]][] = [
    [
      'created',
      [
        [counts.accountsCreated, 'account'],
        [counts.catalogsCreated, 'catalog'],
        [counts.resourcesCreated, 'resource'],
        [counts.resourceVersionsCreated, 'resource version'],
      ],
    ],
    [
      'updated',
      [
        [counts.catalogsUpdated, 'catalog'],
        [counts.resourcesUpdated, 'resource'],
      ],
    ],
    ['archived', [[counts.resourcesArchived, 'resource']]],
    ['superseded', [[counts.resourceVersionsSuperseded, 'resource version']]],
    [
      'published',
      [
        [counts.catalogVersionsPublished, 'catalog version'],
        [counts.resourceVersionsPublished, 'draft resource version'],
      ],
    ],
  ];
  const clauses = groups.flatMap(([verb, items]) => {
    const parts = items.filter(([count]) => count > 0).map(([count, noun]) => plural(count, noun));
    return parts.length === 0 ? [] : [`${verb} ${parts.join(', ')}`];
  });
  const read = `read ${plural(counts.catalogsRead, 'catalog')}, ${plural(counts.resourceFilesRead, 'resource file')}`;
  if (clauses.length === 0) return `import: nothing to change (${read})`;
  return dryRun
    ? `dry run, nothing written: would have ${clauses.join('; ')} (${read})`
    : `import: ${clauses.join('; ')} (${read})`;
}

export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
