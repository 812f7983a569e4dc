import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDACTED_PATHS } from '../../src/http/access-log.js';
import { parseApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity, type TestIdentity } from '../helpers/credentials.js';
import { givenCatalog, givenResource } from '../helpers/fixtures.js';

/** Every log line the service writes, as text. */
class LogCapture extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.lines.push(chunk.toString('utf8'));
    done();
  }
  get text(): string {
    return this.lines.join('');
  }
}

describe('secrets are never kept or shown twice (D8, D18)', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  let app: FastifyInstance;
  const logs = new LogCapture();
  let token: string;
  let created: { id: string; key: string };
  const answers: string[] = [];

  beforeAll(async () => {
    backend = await createTestBackend();
    const logger = pino({ level: 'trace', redact: { paths: REDACTED_PATHS, censor: '[redacted]' } }, logs);
    identity = createTestIdentity(backend, { logger });
    app = await buildIdentityApp(backend, identity, logger);
    const catalog = await givenCatalog(backend.databases.primary, { slug: 'handbook' });
    await givenResource(backend, catalog, { slug: 'onboarding' });

    token = await identity.mintToken({ user: 'ada', accounts: ['acme'] });
    const authorization = `Bearer ${token}`;
    const response = await app.inject({
      method: 'POST',
      url: '/v3/identity/api-keys',
      headers: { authorization },
      payload: { name: 'ci', accountId: 'acme', scopes: ['playbook:read'] },
    });
    expect(response.statusCode).toBe(201);
    created = response.json();

    // Everything a caller can do with the key afterwards, successful or not; every answer kept.
    const requests = [
      { url: '/v3/playbook/catalogs', headers: { 'x-api-key': created.key } },
      { url: '/v3/playbook/catalogs/svc/handbook/resources', headers: { 'x-api-key': created.key } },
      { url: '/v3/playbook/catalogs', headers: { 'x-api-key': created.key, authorization } },
      { url: '/v3/playbook/catalogs', headers: { 'x-api-key': `${created.key}x` } },
      // Its checksum's last character changed, which a key ending in 0 would not be by writing a 0.
      {
        url: '/v3/playbook/catalogs',
        headers: { 'x-api-key': `${created.key.slice(0, -1)}${created.key.endsWith('0') ? '1' : '0'}` },
      },
      { url: '/v3/identity/api-keys?accountId=acme', headers: { authorization } },
      { url: '/v3/identity/api-keys?accountId=acme', headers: { 'x-api-key': created.key } },
      { url: '/v3/playbook/catalogs', headers: { authorization: `${authorization}x` } },
    ];
    for (const request of requests) {
      const response = await app.inject(request);
      answers.push(JSON.stringify(response.headers), response.body);
    }
    const revoke = await app.inject({
      method: 'DELETE',
      url: `/v3/identity/api-keys/${created.id}`,
      headers: { authorization },
    });
    answers.push(revoke.body);
    const afterRevoke = await app.inject({
      url: '/v3/playbook/catalogs',
      headers: { 'x-api-key': created.key },
    });
    expect(afterRevoke.statusCode).toBe(401);
    answers.push(afterRevoke.body);
    await identity.usage.flush();
  });
  afterAll(async () => {
    await app.close();
    await identity.close();
    await backend.cleanup();
  });

  const secretOf = () => parseApiKey(created.key)!.secret;

  it('keeps neither the key string nor its secret in any table', async () => {
    const db = backend.databases.primary;
    const tables = await db.introspection.getTables();
    expect(tables.map((t) => t.name)).toContain('api_keys');
    let rows = 0;
    for (const table of tables) {
      const content = await db
        .selectFrom(table.name as 'api_keys')
        .selectAll()
        .execute();
      rows += content.length;
      const text = JSON.stringify(content);
      expect(text, table.name).not.toContain(created.key);
      expect(text, table.name).not.toContain(secretOf());
    }
    expect(rows).toBeGreaterThan(0);
    const stored = await db
      .selectFrom('api_keys')
      .selectAll()
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    expect(stored.secret_hash).toBe(createHash('sha256').update(secretOf()).digest('hex'));
  });

  it('writes neither a key, a secret nor a token to any log line', () => {
    expect(logs.lines.length).toBeGreaterThan(10);
    expect(logs.text).not.toContain(created.key);
    expect(logs.text).not.toContain(secretOf());
    expect(logs.text).not.toContain(token);
    expect(logs.text).not.toContain(token.split('.')[2]!);
  });

  it('redacts the credential headers should a request be logged with its headers', () => {
    const capture = new LogCapture();
    const logger = pino({ redact: { paths: REDACTED_PATHS, censor: '[redacted]' } }, capture);
    logger.info(
      { req: { headers: { 'x-api-key': created.key, authorization: `Bearer ${token}` } } },
      'request',
    );
    logger.info({ headers: { 'x-api-key': created.key, authorization: `Bearer ${token}` } }, 'headers');
    expect(capture.text).toContain('[redacted]');
    expect(capture.text).not.toContain(created.key);
    expect(capture.text).not.toContain(token);
  });

  it('shows the key in no answer but its creation: not the list, not an error, not a later read', () => {
    expect(answers.length).toBeGreaterThan(10);
    for (const answer of answers) {
      expect(answer).not.toContain(created.key);
      expect(answer).not.toContain(secretOf());
      expect(answer).not.toContain(token);
    }
  });
});
