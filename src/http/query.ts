import type { TObject, TSchema } from '@sinclair/typebox';
import type { FastifyRequest, preHandlerHookHandler, preValidationHookHandler } from 'fastify';
import { InputError, type InputProblem } from '../foundation/errors.js';

const DECIMAL = /^[0-9]+$/;

declare module 'fastify' {
  interface FastifyRequest {
    /** Problems of the query string found before schema validation, reported with the schema's own. */
    queryProblems: InputProblem[] | null;
  }
}

/**
 * Query strings as D3 reads them, before schema validation: array parameters take repeated and
 * comma-separated values alike; a scalar parameter given twice is refused; integer parameters are
 * plain decimal digits (no `1e2`, `0x10`, `+5` or spaces, which type coercion alone would let in).
 * Unknown parameters are left for the schema's `additionalProperties: false` to name.
 *
 * What is found here does not stop the request at once: schema validation runs too, so that one 400
 * lists every problem (D2), and the preHandler refuses what only the preValidation hook found.
 *
 * Bound to each route whose query schema names parameters, when the route is added: a route that
 * takes none runs neither hook.
 */
export function queryHooks(
  schema: unknown,
): { preValidation: preValidationHookHandler; preHandler: preHandlerHookHandler } | undefined {
  const properties = (schema as TObject | undefined)?.properties;
  if (!properties || Object.keys(properties).length === 0) return undefined;
  return {
    preValidation: (request, _reply, done) => {
      const problems = queryProblems(request.query as Record<string, string | string[]>, properties);
      if (problems.length > 0) request.queryProblems = problems;
      done();
    },
    preHandler: (request, _reply, done) => {
      done(request.queryProblems ? new InputError(request.queryProblems) : undefined);
    },
  };
}

/** Normalises `query` in place (array parameters) and returns what D3 refuses in it. */
function queryProblems(
  query: Record<string, string | string[]>,
  properties: TObject['properties'],
): InputProblem[] {
  const problems: InputProblem[] = [];
  for (const [name, value] of Object.entries(query)) {
    if (!Object.hasOwn(properties, name)) continue;
    const property = properties[name] as TSchema;
    if (property.type === 'array') {
      // Each value once (D20): a list of thousands of the same value is one value to check.
      query[name] = [...new Set((Array.isArray(value) ? value : [value]).flatMap((v) => v.split(',')))];
    } else if (Array.isArray(value)) {
      problems.push({ in: 'query', name, message: 'must be given at most once' });
    } else if (property.type === 'integer') {
      if (!DECIMAL.test(value)) {
        problems.push({ in: 'query', name, message: 'must be a decimal integer' });
      } else if (typeof property.maximum === 'number' && Number(value) > property.maximum) {
        // Checked here because Ajv's coercion turns a digit string beyond double range into
        // Infinity and then lets it through its own `maximum`.
        problems.push({ in: 'query', name, message: `must be <= ${property.maximum}` });
      }
    }
  }
  return problems;
}

/**
 * Every problem of a request the schema refused: the query's found before validation first, then the
 * schema's, less those it found again for a parameter already named.
 */
export function withQueryProblems(
  request: FastifyRequest,
  problems: readonly InputProblem[],
): InputProblem[] {
  const first = request.queryProblems ?? [];
  const named = new Set(first.map((problem) => `${problem.in}:${problem.name}`));
  return [...first, ...problems.filter((problem) => !named.has(`${problem.in}:${problem.name}`))];
}
