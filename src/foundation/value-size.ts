/**
 * Whether `value` holds at most `maxParts` keys and list elements at any depth, and no text longer
 * than `maxTextChars`. Counting stops at the bound, so a value of a million parts costs as many steps
 * as the bound to judge: the check that decides whether some work on a value is small enough to do in
 * one go (D20).
 */
export function holdsAtMost(
  value: unknown,
  maxParts: number,
  maxTextChars = Number.POSITIVE_INFINITY,
): boolean {
  let budget = maxParts;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next === 'string') {
      if (next.length > maxTextChars) return false;
    } else if (typeof next === 'object' && next !== null) {
      const inner = Array.isArray(next) ? next : Object.values(next);
      budget -= inner.length;
      if (budget < 0) return false;
      pending.push(...inner);
    }
  }
  return true;
}
