/**
 * Where the part of `text` that starts at `from` ends: `size` UTF-16 code units on, or one fewer where
 * that would cut between the two halves of a surrogate pair, so that the part is well-formed text on its
 * own (stored as UTF-8, a lone half would become U+FFFD); the text's end where it comes first. What is
 * cut part by part from text that grows (`text` being what is known so far) is cut as the whole would
 * be, as long as a part is cut only once more text is known to follow it.
 *
 * @example
 * partEnd('a😀b', 0, 2); // 1: 'a', for a cut at 2 would part the emoji's halves
 */
export function partEnd(text: string, from: number, size: number): number {
  if (size < 2) throw new RangeError('a part holds at least two code units');
  const to = from + size;
  if (to >= text.length) return text.length;
  const last = text.charCodeAt(to - 1);
  return last >= 0xd800 && last <= 0xdbff ? to - 1 : to;
}

/**
 * `text` in consecutive parts of at most `size` UTF-16 code units, each cut at its `partEnd`. An empty
 * text is one empty part.
 *
 * @example
 * textParts('abcde', 2); // ['ab', 'cd', 'e']
 */
export function textParts(text: string, size: number): string[] {
  const parts: string[] = [];
  let from = 0;
  do {
    const to = partEnd(text, from, size);
    parts.push(text.slice(from, to));
    from = to;
  } while (from < text.length);
  return parts;
}
