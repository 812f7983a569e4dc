import type { TObject, TSchema } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { InputError, type InputProblem } from '../errors.js';

const DECIMAL = /^[0-9]+$/;

/**
 * Query strings as D3 reads them, before schema validation: array parameters take repeated and
 * comma-separated values alike; a scalar parameter given twice is refused; integer parameters are
 * plain decimal digits (no `1e2`, `0x10`, `+5` or spaces, which type coercion alone would let in).
 * Unknown parameters are left for the schema's `additionalProperties: false` to name.
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
    const property: TSchema | undefined = schema.properties[name];
    if (!property) continue;
    if (property.type === 'array') {
      query[name] = (Array.isArray(value) ? value : [value]).flatMap((v) => v.split(','));
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
  done(problems.length > 0 ? new InputError(problems) : undefined);
}
