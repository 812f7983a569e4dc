import type { Pool, PoolClient } from 'pg';

/** A pool client's `query`, in any of the forms `pg` takes, returning what `pg` returns. */
export type ClientQuery = (...args: unknown[]) => unknown;

/** What a pool makes of each client's `query`: given the client's own, the one the client is lent with. */
export type QueryWrap = (query: ClientQuery) => ClientQuery;

/** A client's `query` as it is. */
export const unwrapped: QueryWrap = (query) => query;

/**
 * `pool`, whose clients are lent with `wrap` of their own `query`; everything else of the pool and of
 * its clients is theirs. Kysely uses a pool through `connect`, then `query` and `release` on the client.
 * One wrapping serves every change to queries: compose them in `wrap`, so that a query passes through
 * one function of each and one proxy.
 *
 * @param connect how a client is taken from `pool` (its own `connect` by default)
 */
export function wrappingQueries(
  pool: Pool,
  wrap: QueryWrap,
  connect: () => Promise<PoolClient> = () => pool.connect(),
): Pool {
  const lend = async (): Promise<PoolClient> => {
    const client = await connect();
    const query = wrap(client.query.bind(client) as ClientQuery);
    return new Proxy(client, {
      get(target, property, receiver) {
        return property === 'query' ? query : Reflect.get(target, property, receiver);
      },
    });
  };
  return new Proxy(pool, {
    get(target, property, receiver) {
      return property === 'connect' ? lend : Reflect.get(target, property, receiver);
    },
  });
}
