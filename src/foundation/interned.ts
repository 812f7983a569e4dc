/**
 * One text per distinct value, for the fields that repeat across a large write (version labels, media
 * types, facets): a JSON parser makes a new string for every occurrence, and a write of 100,000
 * Resources holds them all until it is written.
 *
 * @example
 * const interned = new Interned();
 * interned.of(JSON.parse('"1.0.0"')) === interned.of(JSON.parse('"1.0.0"')); // the same string
 */
export class Interned {
  private readonly values = new Map<string, string>();

  of(value: string): string {
    const held = this.values.get(value);
    if (held !== undefined) return held;
    this.values.set(value, value);
    return value;
  }
}
