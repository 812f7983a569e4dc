import type { TSchema } from '@sinclair/typebox';
import type { TypeCheck } from '@sinclair/typebox/compiler';
import { type ValueError, ValueErrorType } from '@sinclair/typebox/errors';
import { PATTERN_RULES, SLUG_PATTERN } from '../schemas/common.js';

const SLUG_RULE = 'must be a slug: lowercase letters and digits in groups joined by single hyphens';

/**
 * One line per invalid field of `value`, each `<file>: <field>: <what is wrong>`, worded for the
 * person who edits the file rather than in JSON Schema terms.
 *
 * @example
 * schemaProblems(resourceFileChecker, { kind: 'document' }, 'handbook/resources/a.json');
 * // ['handbook/resources/a.json: title: is required', …]
 */
export function schemaProblems<T extends TSchema>(
  checker: TypeCheck<T>,
  value: unknown,
  file: string,
): string[] {
  if (checker.Check(value)) return [];
  const lines: string[] = [];
  // A missing or mistyped field fails several keywords at once; the first says it best.
  const seen = new Set<string>();
  for (const error of checker.Errors(value)) {
    if (seen.has(error.path)) continue;
    seen.add(error.path);
    // A problem with the whole document (not an object at all) has no field to name.
    lines.push(
      error.path === ''
        ? `${file}: ${describe(error)}`
        : `${file}: ${fieldName(error.path)}: ${describe(error)}`,
    );
  }
  return lines;
}

/** The rule a slug-shaped name breaks, for folder and file names. */
export function slugRule(value: string): string {
  if (value.length === 0) return 'must not be empty';
  if (value.length > 120) return 'must be at most 120 characters';
  return SLUG_RULE;
}

/** `/facets/capability/0` → `facets.capability[0]`. */
function fieldName(pointer: string): string {
  let name = '';
  for (const raw of pointer.slice(1).split('/')) {
    const segment = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (/^\d+$/.test(segment)) name += `[${segment}]`;
    else if (/^[A-Za-z_$][\w$]*$/.test(segment)) name += name === '' ? segment : `.${segment}`;
    else name += `[${JSON.stringify(segment)}]`;
  }
  return name;
}

function describe(error: ValueError): string {
  const schema = error.schema as TSchema & Record<string, unknown>;
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return 'is required';
    case ValueErrorType.ObjectAdditionalProperties: {
      const known = Object.keys((schema.properties as Record<string, unknown> | undefined) ?? {});
      return `is not a known field (known: ${known.join(', ')})`;
    }
    case ValueErrorType.Object:
      return 'must be a JSON object';
    case ValueErrorType.Array:
      return 'must be an array';
    case ValueErrorType.String:
      return 'must be a string';
    case ValueErrorType.StringMinLength:
      return schema.minLength === 1 ? 'must not be empty' : `must be at least ${schema.minLength} characters`;
    case ValueErrorType.StringMaxLength:
      return `must be at most ${schema.maxLength} characters`;
    case ValueErrorType.StringPattern:
      return schema.pattern === SLUG_PATTERN
        ? SLUG_RULE
        : (PATTERN_RULES[String(schema.pattern)] ?? `must match ${String(schema.pattern)}`);
    case ValueErrorType.Union: {
      const values = ((schema.anyOf as { const?: unknown }[] | undefined) ?? []).map(
        (member) => member.const,
      );
      return values.every((value) => typeof value === 'string')
        ? `must be one of ${values.join(', ')}`
        : error.message.toLowerCase();
    }
    default:
      return error.message.charAt(0).toLowerCase() + error.message.slice(1);
  }
}
