/**
 * A comparator of items by a text of theirs, in UTF-16 code-unit order, as `<` compares: never the
 * locale's, so that lists, plans and messages come out alike on every machine. For the ASCII that
 * slugs are made of (D3), it is byte order too.
 */
export function byText<T>(text: (item: T) => string): (a: T, b: T) => number {
  return (a, b) => {
    const left = text(a);
    const right = text(b);
    return left < right ? -1 : left > right ? 1 : 0;
  };
}
