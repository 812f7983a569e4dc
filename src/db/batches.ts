/**
 * Bound parameters allowed in one statement. SQLite stops at 32766 and PostgreSQL at 65535; staying
 * below both lets one batching rule serve every dialect.
 */
export const MAX_BOUND_PARAMETERS = 30_000;

/** Values in one `in (…)` list: long lists are split so that no statement nears the bound. */
export const MAX_IN_LIST = 1_000;

/** Splits `items` into consecutive slices of at most `size` items. */
export function chunk<T>(items: readonly T[], size: number): T[][] {
  const slices: T[][] = [];
  for (let start = 0; start < items.length; start += size) slices.push(items.slice(start, start + size));
  return slices;
}

/** How many rows of `columns` values fit in one multi-row insert. */
export function rowsPerInsert(columns: number): number {
  return Math.max(1, Math.floor(MAX_BOUND_PARAMETERS / columns));
}

/**
 * Maps `items` through `work` with at most `limit` calls in flight, keeping the input order in the
 * result. File reads and object writes go through this so that a large tree neither runs one file at
 * a time nor opens thousands of descriptors at once.
 */
export async function mapWithLimit<T, R>(
  items: readonly T[],
  limit: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const worker = async () => {
    // After a failure no item is started, and the call settles only once none is running, so that a
    // caller cleaning up after the failure sees every effect the work had.
    while (next < items.length && !failed) {
      const index = next++;
      try {
        results[index] = await work(items[index] as T, index);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  const settled = await Promise.allSettled(Array.from({ length: Math.min(limit, items.length) }, worker));
  const rejected = settled.find((outcome) => outcome.status === 'rejected');
  if (rejected) throw rejected.reason;
  return results;
}

/**
 * Counts items done and calls `report` each time the count passes a multiple of `every`, and once at
 * the end, so that long phases show progress without one line per item; short ones stay silent.
 */
export function progressCounter(
  total: number,
  label: string,
  report: ((line: string) => void) | undefined,
  every = 1_000,
): (increment?: number) => void {
  let done = 0;
  return (increment = 1) => {
    const before = done;
    done += increment;
    const passed = Math.floor(done / every) > Math.floor(before / every);
    if (report && (passed || (done === total && total >= every))) {
      report(`${label} ${done} of ${total}`);
    }
  };
}
