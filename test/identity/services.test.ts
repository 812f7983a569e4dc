import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServices } from '../../src/composition/services.js';
import { loadConfig } from '../../src/foundation/config.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';

describe('identity wired into the services', () => {
  let backend: TestBackend;
  const logger = pino({ level: 'silent' });

  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('tells a newcomer how to create a key and read with it on the embedded default', async () => {
    const services = createServices(loadConfig(backend.env), logger);
    const lines = services.gettingStarted('http://127.0.0.1:8080');
    await services.close();
    expect(lines.length).toBeLessThanOrEqual(8);
    const text = lines.join('\n');
    expect(text).toContain('npx playbook keys create --account demo');
    expect(text).toContain(
      'curl -s http://127.0.0.1:8080/v3/playbook/catalogs -H "x-api-key: $PLAYBOOK_API_KEY"',
    );
    expect(text).toContain('http://127.0.0.1:8080/docs/guides');
  });

  it('points at the identity provider when a JWKS URL is configured', async () => {
    const services = createServices(
      loadConfig({ ...backend.env, PLAYBOOK_JWKS_URL: 'https://id.example/jwks.json' }),
      logger,
    );
    const text = services.gettingStarted('http://127.0.0.1:8080').join('\n');
    await services.close();
    expect(text).not.toContain('playbook token');
    expect(text).toContain('https://id.example/jwks.json');
  });

  it('writes pending lastUsedAt times on close', async () => {
    const services = createServices(loadConfig(backend.env), logger);
    const { identity, databases } = services;
    const created = await identity.keys.createFor(
      { subject: 'ada', accounts: ['acme'] },
      { name: 'k', accountId: 'acme', scopes: ['playbook:read'] },
    );
    await identity.verifier.verify(created.key);
    const before = await databases.primary
      .selectFrom('api_keys')
      .select('last_used_at')
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    expect(before.last_used_at).toBeNull();
    await services.close();
    const after = await backend.databases.primary
      .selectFrom('api_keys')
      .select('last_used_at')
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    expect(after.last_used_at).not.toBeNull();
  });
});
