/**
 * `text` in consecutive parts of at most `size` UTF-16 code units, never cut between the two halves of
 * a surrogate pair, so that each part is well-formed text on its own (stored as UTF-8, a lone half
 * would become U+FFFD). An empty text is one empty part.
 *
 * @example
 * textParts('abcde', 2); // ['ab', 'cd', 'e']
 */
export function textParts(text: string, size: number): string[] {
  if (size < 2) throw new RangeError('a part holds at least two code units');
  const parts: string[] = [];
  let from = 0;
  do {
    let to = Math.min(from + size, text.length);
    const last = text.charCodeAt(to - 1);
    if (to < text.length && last >= 0xd800 && last <= 0xdbff) to--;
    parts.push(text.slice(from, to));
    from = to;
  } while (from < text.length);
  return parts;
}
