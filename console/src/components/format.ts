/** A time as the console shows it: the same for every reader, in UTC, to the minute. */
export function when(at: string | undefined): string {
  if (at === undefined) return '—';
  const date = new Date(at);
  if (Number.isNaN(date.getTime())) return at;
  return `${date.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** A size in bytes, in the unit that keeps it short. */
export function bytes(count: number): string {
  if (count < 1024) return `${count} B`;
  if (count < 1024 * 1024) return `${(count / 1024).toFixed(1)} KiB`;
  return `${(count / 1024 / 1024).toFixed(1)} MiB`;
}

/** A value of a `datetime-local` field, taken as UTC as the console shows times, as RFC 3339. */
export function fromLocalField(value: string): string | undefined {
  if (value === '') return undefined;
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(value)) return undefined;
  const date = new Date(`${value}Z`);
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString();
}
