import type { TObject, TSchema } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { InputError, type InputProblem } from '../errors.js';

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
 * lists every problem (D2), and `refuseQueryProblems` refuses what only this hook found.
 */
export function normalizeQuery(
  request: FastifyRequest,
  _reply: FastifyReply,
  done: HookHandlerDoneFunction,
): void {
  const schema = request.routeOptions.schema?.querystring as TObject | undefined;
  if (!schema?.properties) {
    done();
    return;
  }
  const query = request.query as Record<string, string | string[]>;
  const problems: InputProblem[] = [];
  for (const [name, value] of Object.entries(query)) {
    if (!Object.hasOwn(schema.properties, name)) continue;
    const property = schema.properties[name] as TSchema;
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
  if (problems.length > 0) request.queryProblems = problems;
  done();
}

/** preHandler: the query's problems when schema validation found none of its own. */
export function refuseQueryProblems(
  request: FastifyRequest,
  _reply: FastifyReply,
  done: HookHandlerDoneFunction,
): void {
  done(request.queryProblems ? new InputError(request.queryProblems) : undefined);
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
