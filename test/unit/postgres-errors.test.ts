import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { translatePostgresError } from '../../src/db/postgres-errors.js';
import { UnavailableError } from '../../src/foundation/errors.js';

/** A server error as `pg` raises it: a DatabaseError with a SQLSTATE and a severity. */
function serverError(code: string, message = 'any words the server chose'): Error {
  const error = new pg.DatabaseError(message, 0, 'error');
  error.code = code;
  error.severity = 'ERROR';
  return error;
}

describe('#12: PostgreSQL outages are told by class and code, never by message', () => {
  it.each([
    ['08006', 'connection failure'],
    ['08001', 'cannot connect now'],
    ['53300', 'too many connections'],
    ['57P01', 'terminating connection due to administrator command'],
    ['57P03', 'the database system is starting up'],
    ['57014', 'canceling statement due to statement timeout'],
  ])('a server error of SQLSTATE %s is an outage (503)', (code) => {
    const translated = translatePostgresError(serverError(code));
    expect(translated).toBeInstanceOf(UnavailableError);
    expect((translated as Error).cause).toMatchObject({ code });
  });

  it.each([
    ['23505', 'a unique violation'],
    ['40001', 'a serialization failure, which an import retries'],
    ['42P01', 'an undefined table'],
  ])('a server error of SQLSTATE %s stays as it is (%s)', (code) => {
    const error = serverError(code, 'connection terminated unexpectedly');
    expect(translatePostgresError(error)).toBe(error);
  });

  it.each(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH'])(
    'a network error %s is an outage',
    (code) => {
      expect(translatePostgresError(Object.assign(new Error('x'), { code }))).toBeInstanceOf(
        UnavailableError,
      );
    },
  );

  it("pg's own errors while connecting or waiting are outages, whatever their words", () => {
    for (const message of [
      'timeout exceeded when trying to connect',
      'Query read timeout',
      'a reworded message',
    ]) {
      expect(translatePostgresError(new Error(message))).toBeInstanceOf(UnavailableError);
    }
  });

  it('a programming error stays a bug (500), even if its message reads like an outage', () => {
    const error = new TypeError('Connection terminated: not a string');
    expect(translatePostgresError(error)).toBe(error);
  });
});
