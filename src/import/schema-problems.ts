import { Slug } from '../schemas/common.js';
import { compileCheck, problemsOf, type SchemaCheck } from '../schemas/schema-check.js';

/**
 * One line per invalid field of `value`, each `<file>: <field>: <what is wrong>`: the problems of the
 * one schema translator (schemas/schema-check.ts), rendered as the person who edits the file reads them.
 *
 * @example
 * schemaProblems(resourceFileCheck, { kind: 'document' }, 'handbook/resources/a.json');
 * // ['handbook/resources/a.json: title: is required', …]
 */
export function schemaProblems(check: SchemaCheck, value: unknown, file: string): string[] {
  // A problem with the whole document (not an object at all) has no field to name.
  return problemsOf(check, value).map(({ name, message }) =>
    name === '' ? `${file}: ${message}` : `${file}: ${name}: ${message}`,
  );
}

const slugCheck = compileCheck(Slug, true);

/**
 * What is wrong with a folder or file name that must be a slug, in the words of a slug field's
 * problem; undefined when it is one.
 */
export function slugProblem(name: string): string | undefined {
  return problemsOf(slugCheck, name)[0]?.message;
}
