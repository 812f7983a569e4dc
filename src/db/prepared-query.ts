import type { Compilable, CompiledQuery } from 'kysely';
import { nameStatement } from './named-statements.js';
import type { Db } from './tables.js';

/**
 * What a query built once takes for each of its values: a text that stands for the value while the
 * query is built, and is replaced by the value each time it runs.
 */
export type Slots<K extends string> = { readonly [P in K]: string };

/** Starts the text a slot stands for while its query is built: no constant of a query starts so. */
const MARKER = '\u0000slot:';

/** `*` or `"table".*` in a select list (not `count(*)`). */
const SELECTS_EVERY_COLUMN = /(?:^|[\s,])(?:"[^"]+"\.)?\*(?=[\s,]|$)/;

/**
 * `columns`, when they are every column of `Row`; otherwise a type error that names those missing.
 * For the select lists of prepared queries, which cannot read `*`.
 *
 * @example
 * const KEY_COLUMNS = everyColumnOf<ApiKeyRow>()(['id', 'account_id', …]);
 */
export function everyColumnOf<Row>() {
  return <const C extends readonly (keyof Row & string)[]>(
    columns: C &
      ([Exclude<keyof Row, C[number]>] extends [never]
        ? unknown
        : { missing: Exclude<keyof Row, C[number]> }),
  ): C => columns;
}

interface Template {
  readonly compiled: CompiledQuery;
  /** The positions of `compiled.parameters` that take a value, and which one. */
  readonly slots: readonly (readonly [index: number, name: string])[];
}

/**
 * A query that is built and compiled once for each database and shape, then run with new values.
 * Kysely builds and compiles every query afresh: for a detail read that misses the answers in memory
 * that was a third of the time the query took, and most of its garbage (D30). A shape names what
 * changes the query's text rather than its values (a caller with no account sees less, so the
 * condition itself differs).
 *
 * Values must reach the query as parameters, as Kysely's comparisons pass them: a slot written into
 * the query's text (a literal) is an error when the query is first built. A shape may leave a value
 * out (a caller with no account has none to compare).
 *
 * @example
 * const byId = new PreparedQuery(['id'], (db, slot, _shape: 'any') =>
 *   db.selectFrom('resources').selectAll().where('id', '=', slot.id));
 * const rows = await byId.run(db, 'any', { id });
 */
export class PreparedQuery<K extends string, S extends string, R> {
  /**
   * By the database's adapter, which a transaction shares with the database it runs on: a query run in
   * a transaction is built once too, not once per transaction.
   */
  private readonly templates = new WeakMap<object, Map<string, Template>>();

  constructor(
    private readonly names: readonly K[],
    private readonly build: (db: Db, slot: Slots<K>, shape: S) => Compilable<R>,
  ) {}

  /** The rows of the query of `shape` for `values`, on `db` (a transaction too). */
  async run(db: Db, shape: S, values: { readonly [P in K]: unknown }): Promise<R[]> {
    const { compiled, slots } = this.templateFor(db, shape);
    const parameters = [...compiled.parameters];
    for (const [index, name] of slots) parameters[index] = values[name as K];
    const result = await db.executeQuery<R>({ ...compiled, parameters });
    return result.rows;
  }

  private templateFor(db: Db, shape: S): Template {
    const { adapter } = db.getExecutor();
    let shapes = this.templates.get(adapter);
    if (!shapes) {
      shapes = new Map();
      this.templates.set(adapter, shapes);
    }
    const held = shapes.get(shape);
    if (held) return held;
    const slot = Object.fromEntries(this.names.map((name) => [name, `${MARKER}${name}`])) as Slots<K>;
    const compiled = this.build(db, slot, shape).compile();
    const slots: [number, string][] = [];
    compiled.parameters.forEach((value, index) => {
      if (typeof value === 'string' && value.startsWith(MARKER))
        slots.push([index, value.slice(MARKER.length)]);
    });
    if (compiled.sql.includes(MARKER)) throw new Error('a prepared query has a value outside its parameters');
    // A statement PostgreSQL keeps prepared fails once a table it reads `*` of gains a column (a
    // migration while instances serve): "cached plan must not change result type".
    if (SELECTS_EVERY_COLUMN.test(compiled.sql))
      throw new Error('a prepared query names the columns it reads');
    // PostgreSQL keeps its plan too (SQLite's statements are kept by the driver, create-db.ts).
    nameStatement(compiled.sql);
    const template = { compiled, slots };
    shapes.set(shape, template);
    return template;
  }
}
