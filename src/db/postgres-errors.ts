import type { Pool, PoolClient } from 'pg';
import { UnavailableError } from '../foundation/errors.js';
import { type HealthReport, UNWATCHED } from '../observability/dependency-health.js';
import { type QueryWrap, unwrapped, wrappingQueries } from './client-queries.js';

/**
 * SQLSTATE classes that mean the database is out of reach or overloaded rather than that the
 * statement is wrong: connection exceptions (08), insufficient resources (53, too many connections
 * among them), operator intervention (57P: shutdown, restart), and 57014, a statement cancelled by
 * `statement_timeout` because the server did not finish in time.
 */
function isOutageCode(code: string): boolean {
  return (
    code.startsWith('08') ||
    code.startsWith('53') ||
    code.startsWith('57P') ||
    code === '57014' ||
    // A write sent to a standby (during a failover, while the URL still names the old primary).
    code === '25006'
  );
}

/** Node's own codes for a peer that cannot be reached. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EPIPE',
  'EHOSTUNREACH',
  'EAI_AGAIN',
]);

/**
 * What a failure of `pg` means, told by its class and code, never by its message:
 * - an error the server answered (a `DatabaseError`, with a SQLSTATE and a severity) is an outage
 *   only in the classes above; any other (a constraint, a serialization failure a caller retries)
 *   stays as it is;
 * - an error of Node's network is an outage;
 * - any other error `pg` raises itself while connecting or waiting (its pool's checkout timeout, its
 *   read timeout, a connection that ended) is an outage too, save the programming errors
 *   (`TypeError`, `RangeError`), which must show as the bugs they are.
 */
export function translatePostgresError(error: unknown): unknown {
  if (!(error instanceof Error) || error instanceof UnavailableError) return error;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  const answeredByServer = typeof severity === 'string' && typeof code === 'string';
  const outage = answeredByServer
    ? isOutageCode(code)
    : (typeof code === 'string' && NETWORK_CODES.has(code)) ||
      !(error instanceof TypeError || error instanceof RangeError);
  return outage ? new UnavailableError('the database did not answer', { cause: error }) : error;
}

/**
 * The pool as Kysely uses it (`connect`, then `query` and `release` on the client, and `end`), with
 * every failure translated where it happens, so that the HTTP edge maps domain errors only. Each
 * outcome tells the database's health whether it answered (D31); a connection that could not be
 * opened is reported to `onConnectFailure` (its time counts in the metrics: no statement ran).
 *
 * @param inner what each query passes through first, within the same wrapping (naming statements)
 */
export function translatingPool(
  pool: Pool,
  health: HealthReport = UNWATCHED,
  onConnectFailure: (milliseconds: number) => void = () => {},
  inner: QueryWrap = unwrapped,
): Pool {
  const failed = (error: unknown): unknown => {
    const translated = translatePostgresError(error);
    if (translated instanceof UnavailableError) health.failed(translated);
    // A statement the server refused (a constraint, a conflict) is an answer: it is up.
    else health.succeeded();
    return translated;
  };
  // Only an answer to a statement says the database answers: a client handed out of the pool may be an
  // idle connection to a server that no longer answers (a partition that closed nothing).
  const translate = <T>(work: Promise<T>): Promise<T> =>
    work.then(
      (result) => {
        health.succeeded();
        return result;
      },
      (error: unknown) => {
        throw failed(error);
      },
    );
  const connect = (): Promise<PoolClient> => {
    const started = performance.now();
    return pool.connect().catch((error: unknown) => {
      onConnectFailure(performance.now() - started);
      throw failed(error);
    });
  };
  const translating: QueryWrap = (own) => {
    const query = inner(own);
    return (...args) => {
      const result = query(...args);
      // A cursor (streamed rows) is returned as it is; a promise of rows is translated.
      return result instanceof Promise ? translate(result) : result;
    };
  };
  return wrappingQueries(pool, translating, connect);
}
