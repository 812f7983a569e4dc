import AjvCompiler from '@fastify/ajv-compiler';
import type { Static, TSchema } from '@sinclair/typebox';
import { PATTERN_RULES } from './common.js';

/**
 * The one translator of schema errors into problems a person can act on: every door that checks a
 * value against a schema (a request's query, path, headers and body; an import tree's files) names the
 * field as its author writes it and says what it must be, in the same words. Each door then renders
 * the problems in its own terms (`errors[]` of a 400; `file: field: problem` lines of an import).
 */

/** One schema error, as Ajv reports it (with `verbose`, the schema object that holds the keyword). */
export interface SchemaError {
  readonly instancePath: string;
  readonly keyword: string;
  readonly message?: string;
  readonly params: Record<string, unknown>;
  readonly parentSchema?: { readonly properties?: Record<string, unknown> };
}

/** A field and what is wrong with it. `name` is empty for the value as a whole. */
export interface FieldProblem {
  readonly name: string;
  readonly message: string;
}

export interface ProblemOptions {
  /**
   * Query parameters: a parameter is named as the caller sent it (`kind`), not by the path of one
   * element of the array it was parsed into (`kind.1`); the element is named in the message instead.
   */
  readonly parameters?: boolean;
}

/** Keywords whose message says most about what a value must be, best first. */
const TELLING = ['required', 'additionalProperties', 'type', 'minLength', 'pattern', 'enum', 'format'];

/**
 * One problem per field, the one that says most (a schema reports every keyword a value fails:
 * `maxLength` and `pattern` of one id), in the order the errors came.
 *
 * @example
 * fieldProblems([{ instancePath: '/resources/3/title', keyword: 'minLength', params: { limit: 1 } }]);
 * // [{ name: 'resources[3].title', message: 'must not be empty' }]
 */
export function fieldProblems(errors: readonly SchemaError[], options: ProblemOptions = {}): FieldProblem[] {
  const chosen = new Map<string, { problem: FieldProblem; rank: number }>();
  for (const error of errors) {
    const problem = toFieldProblem(error, options);
    const key = `${problem.name}\u0000${error.instancePath}`;
    const rank = TELLING.indexOf(error.keyword) === -1 ? TELLING.length : TELLING.indexOf(error.keyword);
    const held = chosen.get(key);
    if (!held || rank < held.rank) chosen.set(key, { problem, rank });
  }
  return [...chosen.values()].map(({ problem }) => problem);
}

/** A JSON pointer's segments as a caller writes a field: `resources[3].content`, `manifest["a b"]`. */
function fieldPath(segments: readonly string[]): string {
  let path = '';
  for (const segment of segments) {
    if (/^\d+$/.test(segment)) path += `[${segment}]`;
    else if (/^[A-Za-z_$][\w$-]*$/.test(segment)) path += path === '' ? segment : `.${segment}`;
    else path += `[${JSON.stringify(segment)}]`;
  }
  return path;
}

function pointerSegments(pointer: string): string[] {
  return pointer
    .split('/')
    .slice(1)
    .map((segment) => segment.replaceAll('~1', '/').replaceAll('~0', '~'));
}

function article(word: string): string {
  return /^[aeiou]/.test(word) ? 'an' : 'a';
}

function toFieldProblem(error: SchemaError, options: ProblemOptions): FieldProblem {
  const segments = pointerSegments(error.instancePath);
  const element =
    options.parameters === true && segments.length > 1 ? `element ${Number(segments[1]) + 1} ` : '';
  const base = element ? segments[0]! : fieldPath(segments);
  const child = (name: string) => fieldPath([...segments, name]);
  const at = (message: string): FieldProblem => ({ name: base, message: `${element}${message}` });
  const limit = Number(error.params.limit);
  switch (error.keyword) {
    case 'required':
      return { name: child(String(error.params.missingProperty)), message: 'is required' };
    case 'additionalProperties': {
      const known = Object.keys(error.parentSchema?.properties ?? {});
      const what = options.parameters === true ? 'parameter' : 'field';
      return {
        name: child(String(error.params.additionalProperty)),
        message: `is not a known ${what}${known.length > 0 ? ` (known: ${known.join(', ')})` : ''}`,
      };
    }
    case 'enum':
      return at(`must be one of ${(error.params.allowedValues as unknown[] | undefined)?.join(', ')}`);
    case 'pattern':
      return at(PATTERN_RULES[String(error.params.pattern)] ?? `must match ${String(error.params.pattern)}`);
    case 'type': {
      // A nullable field's types come as one list: `array,null`.
      const types = String(error.params.type)
        .split(',')
        .map((type) =>
          type === 'object' ? 'a JSON object' : type === 'null' ? 'null' : `${article(type)} ${type}`,
        );
      return at(`must be ${types.join(' or ')}`);
    }
    case 'minLength':
      return at(limit === 1 ? 'must not be empty' : `must be at least ${limit} characters`);
    case 'maxLength':
      return at(`must be at most ${limit} characters`);
    case 'minItems':
      return at(limit === 1 ? 'must not be empty' : `must hold at least ${limit} items`);
    case 'maxItems':
      return at(`must hold at most ${limit} items`);
    case 'uniqueItems':
      return at('must not hold the same value twice');
    default:
      return at(error.message ?? 'is invalid');
  }
}

/** A compiled check of one schema: true when the value is valid, else its errors in `errors`. */
export type SchemaCheck<T = unknown> = ((value: unknown) => value is T) & { errors?: SchemaError[] | null };

/**
 * The options of every check of a JSON value (request bodies, import files): no coercion, nothing
 * dropped, defaults filled, and each error with the schema that holds it (`verbose`), for the known
 * fields of an unknown one.
 */
export const JSON_CHECK_OPTIONS = {
  removeAdditional: false,
  coerceTypes: false,
  useDefaults: true,
  verbose: true,
} as const;

const compilers = AjvCompiler();
const firstProblem = compilers({}, { customOptions: { ...JSON_CHECK_OPTIONS, allErrors: false } });
const everyProblem = compilers({}, { customOptions: { ...JSON_CHECK_OPTIONS, allErrors: true } });

/**
 * Compiles `schema` into a check of JSON values: one that stops at the first problem, or one that
 * finds every problem (`every`), for values small enough to describe whole. The compilation is made
 * on the first check: modules declare their checks where they load, and a serving instance loads
 * those of commands it never runs (an import, a pull), which cost it start-up time and memory.
 */
export function compileCheck<T extends TSchema>(schema: T, every: boolean): SchemaCheck<Static<T>> {
  let compiled: SchemaCheck<Static<T>> | undefined;
  const check = ((value: unknown) => {
    compiled ??= compileCheckNow(schema, every);
    const valid = compiled(value);
    check.errors = compiled.errors ?? null;
    return valid;
  }) as SchemaCheck<Static<T>>;
  return check;
}

/**
 * `compileCheck` compiled at once: for a check a request must not wait for, whose compilation would
 * hold the event loop for longer than a request may (a published Catalog's, D20).
 */
export function compileCheckNow<T extends TSchema>(schema: T, every: boolean): SchemaCheck<Static<T>> {
  const compiler = every ? everyProblem : firstProblem;
  const check = compiler({ schema, method: 'PUT', url: '(json value)', httpPart: 'body' });
  return check as unknown as SchemaCheck<Static<T>>;
}

/**
 * Every problem of `value` against a check that finds them all, one per field; none when it is valid.
 *
 * @example
 * problemsOf(resourceFileCheck, { kind: 'document' }); // [{ name: 'title', message: 'is required' }, …]
 */
export function problemsOf(check: SchemaCheck, value: unknown, options: ProblemOptions = {}): FieldProblem[] {
  return check(value) ? [] : fieldProblems(check.errors ?? [], options);
}
