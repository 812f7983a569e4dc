import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenAccount } from '../helpers/fixtures.js';

/**
 * D21: a lone UTF-16 surrogate, which valid UTF-8 cannot carry but a JSON escape can, is refused in
 * every text field that refuses control characters, through every door of the HTTP API; a surrogate
 * pair (an emoji) is text like any other.
 */

const CATALOG = '/v3/playbook/catalogs/org/handbook';
const RESOURCE = `${CATALOG}/resources/intro`;
/** The emoji test's own Catalog: what the refusals leave (nothing) is no concern of it. */
const EMOJI_CATALOG = '/v3/playbook/catalogs/org/emoji';

/** JSON.stringify writes a lone surrogate as its `\uXXXX` escape: the body is valid UTF-8. */
const LONE = [
  ['a lone high surrogate', '\ud800'],
  ['a lone low surrogate', '\udc00'],
  ['a high surrogate between letters', 'a\ud800b'],
  ['a low surrogate before a high one', 'a\udc00\ud800b'],
  ['a high surrogate at the end', 'name \udbff'],
  ['a pair followed by a lone low surrogate', '\ud83d\ude00\ude00'],
] as const;

const resource = (overrides: Record<string, unknown> = {}) => ({
  kind: 'document',
  title: 'Introduction',
  version: '1.0.0',
  mediaType: 'text/markdown',
  description: 'Where to start',
  content: '# Introduction\n',
  ...overrides,
});

const catalogBody = (overrides: Record<string, unknown> = {}, resourceOverrides = {}) => ({
  name: 'Handbook',
  version: '1',
  description: 'How we work',
  resources: [{ slug: 'intro', ...resource(resourceOverrides) }],
  ...overrides,
});

describe('D21: lone surrogates in text fields', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  let writer: Record<string, string>;
  let bearer: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    identity = createTestIdentity(backend);
    app = await buildIdentityApp(backend, identity);
    await givenAccount(backend.databases.primary, 'acme');
    writer = (await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read', 'playbook:write'] }))
      .headers;
    bearer = await identity.tokenHeaders({ accounts: ['acme'] });
  });
  afterAll(async () => {
    await app?.close();
    await identity?.close();
    await backend?.cleanup();
  });

  const send = (method: 'PUT' | 'POST', url: string, body: unknown, headers: Record<string, string>) =>
    app.inject({
      method,
      url,
      headers: { ...headers, 'content-type': 'application/json' },
      payload: JSON.stringify(body),
    });
  const refusedFields = (answer: LightMyRequestResponse): string[] => {
    expect(answer.statusCode, answer.body).toBe(400);
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
    const { errors } = answer.json() as { errors: { in: string; name: string; message: string }[] };
    for (const error of errors) {
      expect(error.in).toBe('body');
      expect(error.message).toMatch(/unpaired surrogates$/);
    }
    return errors.map((error) => error.name);
  };

  describe.each(LONE)('%s', (_what, text) => {
    it('is refused in a published Catalog, naming each field that holds it', async () => {
      const answer = await send(
        'PUT',
        CATALOG,
        catalogBody(
          { name: text, description: text, version: text },
          { title: text, description: text, version: text, mediaType: text },
        ),
        writer,
      );
      expect(refusedFields(answer).sort()).toEqual(
        [
          'name',
          'description',
          'version',
          'resources[0].title',
          'resources[0].description',
          'resources[0].version',
          'resources[0].mediaType',
        ].sort(),
      );
    });

    it('is refused in a published Resource, naming each field that holds it', async () => {
      const answer = await send(
        'PUT',
        RESOURCE,
        resource({ title: text, description: text, version: text }),
        writer,
      );
      expect(refusedFields(answer).sort()).toEqual(['description', 'title', 'version']);
    });

    it('is refused in the name of a new API key', async () => {
      const answer = await send(
        'POST',
        '/v3/identity/api-keys',
        { name: text, accountId: 'acme', scopes: ['playbook:read'] },
        bearer,
      );
      expect(refusedFields(answer)).toEqual(['name']);
    });
  });

  it('accepts surrogate pairs (emoji) in every one of those fields, and stores them as sent', async () => {
    const emoji = 'Hand 😀 book 🧭';
    const catalog = await send(
      'PUT',
      EMOJI_CATALOG,
      catalogBody({ name: emoji, description: `${emoji}\n${emoji}` }, { title: emoji, description: emoji }),
      writer,
    );
    expect(catalog.statusCode, catalog.body).toBe(201);
    expect(catalog.json().catalog).toMatchObject({ name: emoji, description: `${emoji}\n${emoji}` });

    const updated = await send(
      'PUT',
      `${EMOJI_CATALOG}/resources/intro`,
      resource({ title: `${emoji} 2`, version: '2.0.0' }),
      writer,
    );
    expect(updated.statusCode, updated.body).toBe(200);
    const read = await app.inject({
      url: `/v3/playbook/resources/${updated.json().resource.id}`,
      headers: writer,
    });
    expect(read.json()).toMatchObject({ title: `${emoji} 2` });

    const key = await send(
      'POST',
      '/v3/identity/api-keys',
      { name: `deploy ${emoji}`, accountId: 'acme', scopes: ['playbook:read'] },
      bearer,
    );
    expect(key.statusCode, key.body).toBe(201);
    expect(key.json()).toMatchObject({ name: `deploy ${emoji}` });
  });
});
