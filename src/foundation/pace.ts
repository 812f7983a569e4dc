import { setImmediate as turn } from 'node:timers/promises';

/**
 * How long work on one request may hold the event loop before it lets the others in. D20 allows no
 * request to hold the rest for more than 100 ms at a time; a fifth of that leaves room for the
 * longest single step between two looks at the clock (one statement, one slice of a body).
 */
export const SLICE_MS = 20;

let sliceStarted = performance.now();

/** Lets the event loop turn now, whatever the slice: before one step known to be long on its own. */
export async function nextTurn(): Promise<void> {
  await turn();
  sliceStarted = performance.now();
}

/**
 * Lets the event loop turn (timers, sockets, other requests) when the work running now has held it
 * for a slice; costs a clock read otherwise. Awaited inside every loop whose length the caller sets:
 * parsing and checking a large body, planning and writing a large publish or import.
 *
 * The slice is counted from the last turn this function gave, not from the start of the current
 * task, which the event loop does not tell: after an idle spell the first call turns at once, which
 * costs one turn and never lets a slice run long.
 *
 * @example
 * for (const item of items) {
 *   check(item);
 *   await yieldIfBusy();
 * }
 */
export async function yieldIfBusy(): Promise<void> {
  if (performance.now() - sliceStarted < SLICE_MS) return;
  await nextTurn();
}
