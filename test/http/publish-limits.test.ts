import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenLocally } from '../helpers/app.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';
import { publishedResource as resource } from '../helpers/publish-bodies.js';
import { sleep } from '../helpers/wait.js';
import { dumpStorage } from '../import/support.js';

/**
 * D20 (amended): refusing a publish body costs no more than reading it. Checking stops at the 21st
 * problem, a body holds at most PLAYBOOK_MAX_PUBLISH_RESOURCES Resources (413 past it), and a large
 * wrong body does not hold another account's reads; D21 (amended): nesting past 64 levels is refused
 * before any other work, naming the field. On both stacks.
 */

/** A Resource wrong in every field, as an attacker would send by the thousand. */
const wrong = (index: number) => ({
  slug: `R${index}`,
  kind: 'nope',
  title: '',
  version: '',
  mediaType: '',
  content: 1,
});

/** `{"a":[[…]]}` nested `depth` levels in all, as JSON text (JSON.stringify itself stops short of 5,000). */
function nested(depth: number): string {
  return `{"a":${'['.repeat(depth - 1)}"deep"${']'.repeat(depth - 1)}}`;
}

/** A JSON body with `manifest` (or `facets`, …) as raw JSON text. */
function withRaw(value: Record<string, unknown>, field: string, raw: string): string {
  const text = JSON.stringify({ ...value, [field]: '\u0000raw' });
  return text.replace('"\\u0000raw"', raw);
}

describe('D20, D21: what a publish body may cost', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let base: string;
  let writer: Record<string, string>;
  let otherReader: Record<string, string>;
  let otherResource: string;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend, { env: { PLAYBOOK_MAX_PUBLISH_RESOURCES: '70000' } });
    app = await buildIdentityApp(backend, identity);
    base = await listenLocally(app);
    const db = backend.databases.primary;
    await givenAccount(db, 'attacker');
    await givenAccount(db, 'bystander');
    writer = (await identity.mintKey({ accountId: 'attacker', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    otherReader = (await identity.mintKey({ accountId: 'bystander' })).headers;
    const catalog = await givenCatalog(db, { accountId: 'bystander', slug: 'own' });
    otherResource = (await givenResource(backend, catalog, { slug: 'page' })).id;
  });
  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  const put = (url: string, payload: unknown, headers = writer) =>
    app.inject({
      method: 'PUT',
      url,
      headers: { ...headers, 'content-type': 'application/json' },
      payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
    });
  const problemOf = (answer: { body: string }) => JSON.parse(answer.body);

  it('60,000 wrong Resources: a 400 of 20 problems, fast, while another account reads every 50 ms', async () => {
    const payload = JSON.stringify({
      name: 'Flood',
      version: '1',
      resources: Array.from({ length: 60_000 }, (_, i) => wrong(i)),
    });
    const before = await dumpStorage(backend);
    // The event loop's longest stall, seen from inside the process, and the bystander's reads over HTTP.
    let last = performance.now();
    let worstStall = 0;
    const ticker = setInterval(() => {
      const now = performance.now();
      worstStall = Math.max(worstStall, now - last);
      last = now;
    }, 5);
    const reads: number[] = [];
    let reading = true;
    const reader = (async () => {
      while (reading) {
        const started = performance.now();
        const answer = await fetch(`${base}/v3/playbook/resources/${otherResource}`, {
          headers: otherReader,
        });
        await answer.arrayBuffer();
        expect(answer.status).toBe(200);
        reads.push(performance.now() - started);
        await sleep(50);
      }
    })();
    const rssBefore = process.memoryUsage().rss;
    let rssPeak = rssBefore;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    }, 10);
    await sleep(120);
    const started = performance.now();
    const answer = await fetch(`${base}/v3/playbook/catalogs/org/flood`, {
      method: 'PUT',
      headers: { ...writer, 'content-type': 'application/json' },
      body: payload,
    });
    const body = (await answer.json()) as {
      code: string;
      errors: { in: string; name: string }[];
      detail: string;
    };
    const answeredIn = performance.now() - started;
    await sleep(120);
    reading = false;
    await reader;
    clearInterval(ticker);
    clearInterval(sampler);
    const growthMb = (rssPeak - rssBefore) / 1e6;
    console.log(
      `60,000 wrong Resources (${(payload.length / 1e6).toFixed(1)} MB): answered in ${answeredIn.toFixed(0)} ms; ` +
        `worst event-loop stall ${worstStall.toFixed(0)} ms; bystander's worst read ${Math.max(...reads).toFixed(0)} ms ` +
        `over ${reads.length} reads; RSS +${growthMb.toFixed(0)} MB`,
    );

    expect(answer.status).toBe(400);
    expect(body.code).toBe('invalid_request');
    expect(body.errors).toHaveLength(20);
    expect(body.errors[0]).toMatchObject({ in: 'body', name: 'resources[0].slug' });
    expect(body.detail).toMatch(
      /checking stopped at problem 21: the first 20 are listed, and more may follow/,
    );
    // Before checking stopped at 21 problems, this body took 1.7 s of one event-loop turn and 380 MB.
    expect(worstStall).toBeLessThan(250);
    expect(Math.max(...reads)).toBeLessThan(1000);
    expect(reads.length).toBeGreaterThan(3);
    expect(answeredIn).toBeLessThan(5000);
    expect(growthMb).toBeLessThan(300);
    expect(await dumpStorage(backend)).toEqual(before);
  }, 60_000);

  it('checking stops at the 21st problem; fewer are all listed, each named', async () => {
    const few = await put('/v3/playbook/catalogs/org/few', {
      name: 'Few',
      version: '1',
      resources: [resource('ok'), resource('bad', { kind: 'nope' }), resource('Bad Slug')],
    });
    expect(few.statusCode).toBe(400);
    expect(problemOf(few).detail).toBe('The request is invalid.');
    expect(problemOf(few).errors.map((e: { name: string }) => e.name)).toEqual([
      'resources[1].kind',
      'resources[2].slug',
    ]);

    const many = await put('/v3/playbook/catalogs/org/many', {
      name: 'Many',
      version: '1',
      resources: Array.from({ length: 50 }, (_, i) => resource(`r-${i}`, { kind: 'nope' })),
    });
    expect(many.statusCode).toBe(400);
    const problem = problemOf(many);
    expect(problem.errors).toHaveLength(20);
    expect(problem.errors.map((e: { name: string }) => e.name)).toEqual(
      Array.from({ length: 20 }, (_, i) => `resources[${i}].kind`),
    );
    expect(problem.detail).toBe(
      'The request is invalid; checking stopped at problem 21: the first 20 are listed, and more may follow.',
    );
  });

  it('one Resource with 100,000 unknown fields is one bounded answer', async () => {
    const fields = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`x${i}`, i]));
    const answer = await put('/v3/playbook/catalogs/org/wide', {
      name: 'Wide',
      version: '1',
      resources: [resource('wide', fields)],
    });
    expect(answer.statusCode).toBe(400);
    expect(problemOf(answer).errors.length).toBeLessThanOrEqual(20);
    expect(problemOf(answer).errors[0]).toMatchObject({ in: 'body', name: 'resources[0].x0' });
  });

  it('a title of ten million characters is a 400 naming it, in either PUT, not a 500', async () => {
    const title = '中'.repeat(10_000_000);
    await put('/v3/playbook/catalogs/org/long-titles', { name: 'Long titles', version: '1', resources: [] });
    const cases: [string, unknown, string][] = [
      [
        '/v3/playbook/catalogs/org/long-titles/resources/one',
        resource('one', { title, slug: undefined }),
        'title',
      ],
      [
        '/v3/playbook/catalogs/org/long-titles',
        { name: 'Long titles', version: '2', resources: [resource('one', { title })] },
        'resources[0].title',
      ],
      ['/v3/playbook/catalogs/org/long-titles', { name: title, version: '2', resources: [] }, 'name'],
    ];
    for (const [url, body, name] of cases) {
      const answer = await put(url, body);
      expect(answer.statusCode, name).toBe(400);
      expect(problemOf(answer).errors[0], name).toMatchObject({ in: 'body', name });
    }
  });

  it('facets of 200,000 wrong values, a manifest of 20,000 keys, content with a lone surrogate: each one bounded 400', async () => {
    const capability = Array.from({ length: 200_000 }, (_, i) => `Wrong ${i}`);
    const started = performance.now();
    const facets = await put('/v3/playbook/catalogs/org/wide-facets', {
      name: 'Wide facets',
      version: '1',
      resources: [resource('one', { facets: { capability } })],
    });
    expect(facets.statusCode).toBe(400);
    expect(problemOf(facets).errors.length).toBeLessThanOrEqual(20);
    expect(problemOf(facets).errors[0].name).toMatch(/^resources\[0\]\.facets\.capability/);
    // Listing every problem of that Resource was two and a half seconds of one turn.
    expect(performance.now() - started).toBeLessThan(2000);

    const manifest = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, i]));
    const cases: [string, unknown, string, RegExp][] = [
      [
        '/v3/playbook/catalogs/org/wide-manifest',
        { name: 'Wide manifest', version: '1', resources: [resource('one', { manifest })] },
        'resources[0].manifest',
        /more than 10000 keys and values/,
      ],
      [
        '/v3/playbook/catalogs/org/surrogates',
        { name: 'Surrogates', version: '1', resources: [resource('one', { content: 'a\ud800b' })] },
        'resources[0].content',
        /unpaired surrogates/,
      ],
    ];
    for (const [url, body, name, message] of cases) {
      const answer = await put(url, body);
      expect(answer.statusCode, name).toBe(400);
      expect(problemOf(answer).errors[0], name).toMatchObject({ in: 'body', name });
      expect(problemOf(answer).errors[0].message, name).toMatch(message);
    }
    await put('/v3/playbook/catalogs/org/one-resource', { name: 'One', version: '1', resources: [] });
    const single = await put('/v3/playbook/catalogs/org/one-resource/resources/one', {
      ...resource('one', { content: '\udc00' }),
      slug: undefined,
    });
    expect(single.statusCode).toBe(400);
    expect(problemOf(single).errors[0]).toMatchObject({ in: 'body', name: 'content' });
  });

  it('413 content_too_large past PLAYBOOK_MAX_PUBLISH_RESOURCES, before any Resource is checked, writing nothing', async () => {
    const limited = createTestIdentity(backend, { env: { PLAYBOOK_MAX_PUBLISH_RESOURCES: '10' } });
    const small = await buildIdentityApp(backend, limited);
    try {
      const before = await dumpStorage(backend);
      const answer = await small.inject({
        method: 'PUT',
        url: '/v3/playbook/catalogs/org/too-many',
        headers: { ...writer, 'content-type': 'application/json' },
        // Wrong too: the count is refused first, whatever the Resources hold.
        payload: {
          name: 'Too many',
          version: '1',
          resources: Array.from({ length: 11 }, (_, i) => wrong(i)),
        },
      });
      expect(answer.statusCode).toBe(413);
      expect(answer.headers['content-type']).toContain('application/problem+json');
      expect(problemOf(answer)).toMatchObject({ status: 413, code: 'content_too_large' });
      expect(problemOf(answer).detail).toContain('at most 10');
      expect(await dumpStorage(backend)).toEqual(before);
      const fits = await small.inject({
        method: 'PUT',
        url: '/v3/playbook/catalogs/org/ten',
        headers: { ...writer, 'content-type': 'application/json' },
        payload: {
          name: 'Ten',
          version: '1',
          resources: Array.from({ length: 10 }, (_, i) => resource(`r-${i}`)),
        },
      });
      expect(fits.statusCode).toBe(201);
    } finally {
      await small.close();
      await limited.close();
    }
  });

  it('a manifest nested 5,000 levels is a 400 naming the field, not a 500, and writes nothing', async () => {
    const before = await dumpStorage(backend);
    for (const url of ['/v3/playbook/catalogs/org/deep', '/v3/playbook/catalogs/org/deep/resources/one']) {
      const one = withRaw(resource('one'), 'manifest', nested(5000));
      const body = url.endsWith('/one') ? one : `{"name":"Deep","version":"1","resources":[${one}]}`;
      const answer = await put(url, body);
      expect(answer.statusCode, url).toBe(400);
      const [problem] = problemOf(answer).errors;
      expect(problem.in).toBe('body');
      expect(problem.message).toBe('nests deeper than 64 levels');
      expect(problem.name).toMatch(
        url.endsWith('/one') ? /^manifest\.a\[0\]/ : /^resources\[0\]\.manifest\.a\[0\]/,
      );
    }
    // Facets nested the same way, and a key creation's body: refused the same way, before anything else.
    const facets = await put(
      '/v3/playbook/catalogs/org/deep',
      withRaw({ name: 'Deep', version: '1', resources: [] }, 'facets', nested(200)),
    );
    expect(problemOf(facets).errors[0]).toMatchObject({
      name: 'facets.a[0][0][0][0][0][0]…',
      message: 'nests deeper than 64 levels',
    });
    const token = await identity.tokenHeaders({ accounts: ['attacker'] });
    const key = await app.inject({
      method: 'POST',
      url: '/v3/identity/api-keys',
      headers: { ...token, 'content-type': 'application/json' },
      payload: withRaw(
        { name: 'deep', accountId: 'attacker', scopes: ['playbook:read'] },
        'extra',
        nested(100),
      ),
    });
    expect(key.statusCode).toBe(400);
    expect(problemOf(key).errors[0].message).toBe('nests deeper than 64 levels');
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('64 levels in all are taken; 65 are not', async () => {
    // The body is level 1, resources 2, the Resource 3, the manifest 4: 60 more fill 64.
    const fits = await put('/v3/playbook/catalogs/org/sixty-four', {
      name: 'Deep enough',
      version: '1',
      resources: [resource('one', { manifest: JSON.parse(nested(61)) })],
    });
    expect(fits.statusCode).toBe(201);
    const over = await put('/v3/playbook/catalogs/org/sixty-five', {
      name: 'Too deep',
      version: '1',
      resources: [resource('one', { manifest: JSON.parse(nested(62)) })],
    });
    expect(over.statusCode).toBe(400);
    expect(problemOf(over).errors[0].message).toBe('nests deeper than 64 levels');
  });
});
