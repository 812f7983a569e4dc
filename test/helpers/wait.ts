/** Waiting in tests: for a time, or for a condition within a bound. */

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Resolves once `probe` holds, asking every 25 ms; fails naming `what` once `timeoutMs` has passed,
 * with `detail()` (a child's output, say) added to the message. A probe that throws fails the wait
 * at once with its error.
 */
export async function waitFor(
  what: string,
  probe: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  detail?: () => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within ${timeoutMs} ms${detail === undefined ? '' : `\n${detail()}`}`);
    }
    await sleep(25);
  }
}
