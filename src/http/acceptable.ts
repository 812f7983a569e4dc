import Negotiator from 'negotiator';

/**
 * The media types the API answers in: JSON for what succeeds, problem documents for what does not (D2).
 * A request that accepts neither can be given nothing it asked for (RFC 9110 §12.5.1, §15.5.7). Each is
 * listed with the charset parameter too, so that a range that names it (`application/json;
 * charset=utf-8`) matches.
 */
const ANSWER_TYPES = [
  'application/json; charset=utf-8',
  'application/json',
  'application/problem+json; charset=utf-8',
  'application/problem+json',
];

/**
 * Whether `Accept` leaves the API a media type to answer in, by RFC 9110's rules (media ranges, the
 * most specific range deciding each type's weight, `q=0` ruling a type out). No `Accept`, or an empty
 * one, accepts anything.
 *
 * @example
 * answersAcceptable('text/html, application/*;q=0.1'); // true
 * answersAcceptable('text/html'); // false
 */
export function answersAcceptable(accept: string | undefined): boolean {
  if (accept === undefined || accept.trim() === '') return true;
  return new Negotiator({ headers: { accept } }).mediaTypes(ANSWER_TYPES).length > 0;
}
