import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileSchemas } from '../../src/composition/app.js';
import { LazyCompilers } from '../../src/http/lazy-compilers.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

/**
 * The routes' checks and serializers are compiled on first use (http/lazy-compilers.ts): an idle
 * instance holds none of what it was never asked for, and every one still compiles and behaves as if
 * compiled at start.
 */
describe('schemas compiled on first use', () => {
  it('compiles a check on its first call, once, and reads its errors as Fastify does', () => {
    const lazy = new LazyCompilers();
    let made = 0;
    const check = lazy.check(() => {
      made++;
      const real = (value: unknown) => {
        real.errors = value === 1 ? null : [{ message: `not 1: ${String(value)}` }];
        return value === 1;
      };
      real.errors = null as null | { message: string }[];
      return real;
    });
    expect(made).toBe(0);
    expect(lazy.uncompiled).toBe(1);
    expect(check(2)).toBe(false);
    expect((check as unknown as { errors: unknown }).errors).toEqual([{ message: 'not 1: 2' }]);
    expect(check(1)).toBe(true);
    expect((check as unknown as { errors: unknown }).errors).toBeNull();
    expect(made).toBe(1);
    expect(lazy.uncompiled).toBe(0);
  });

  it('compileAll compiles what was not used, and throws what a compilation throws', () => {
    const lazy = new LazyCompilers();
    let made = 0;
    const serialize = lazy.serializer(() => {
      made++;
      return (data) => JSON.stringify(data);
    });
    lazy.serializer(() => {
      throw new Error('a schema that does not compile');
    });
    expect(made).toBe(0);
    expect(() => lazy.compileAll()).toThrow('a schema that does not compile');
    expect(made).toBe(1);
    expect(serialize({ a: 1 })).toBe('{"a":1}');
    expect(made).toBe(1);
  });

  describe('the application', () => {
    let backend: TestBackend;
    let identity: TestIdentity;
    beforeAll(async () => {
      backend = await createTestBackend();
      identity = createTestIdentity(backend);
    });
    afterAll(async () => {
      await identity.close();
      await backend.cleanup();
    });

    it('starts with its schemas not compiled, and every one of them compiles', async () => {
      const app = await buildIdentityApp(backend, identity);
      try {
        await app.ready();
        const pending = compileSchemas(app);
        // Each route's checks and one serializer a status it answers: hundreds, none compiled yet.
        expect(pending).toBeGreaterThan(100);
        expect(compileSchemas(app)).toBe(0);
        // Compiled ahead or on first use, a check answers alike: a bad query is a 400 naming it.
        const key = (await identity.mintKey({ accountId: 'acme' })).headers;
        const answer = await app.inject({ url: '/v3/playbook/catalogs?pageSize=0', headers: key });
        expect(answer.statusCode).toBe(400);
        expect(answer.json().errors[0].name).toBe('pageSize');
      } finally {
        await app.close();
      }
    });

    it('answers a first request of a route with its schemas compiled then', async () => {
      const app = await buildIdentityApp(backend, identity);
      try {
        const key = (await identity.mintKey({ accountId: 'acme' })).headers;
        const bad = await app.inject({ url: '/v3/playbook/catalogs?pageSize=0', headers: key });
        expect(bad.statusCode).toBe(400);
        expect(bad.json()).toMatchObject({ status: 400, errors: [{ name: 'pageSize' }] });
        const good = await app.inject({ url: '/v3/playbook/catalogs', headers: key });
        expect(good.statusCode).toBe(200);
        expect(good.json()).toMatchObject({ meta: { page: 1 } });
      } finally {
        await app.close();
      }
    });
  });
});
