import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { buildIdentityApp, createTestIdentity } from '../helpers/credentials.js';
import { JwksServer } from '../helpers/jwks.js';

interface OpenApiDocument {
  components: { securitySchemes: Record<string, { description: string }> };
  paths: Record<string, Record<string, { security?: Record<string, string[]>[] }>>;
}

/** The OpenAPI document's security schemes are those the deployment takes (D17, D22). */
describe('security schemes follow the configuration', () => {
  let backend: TestBackend;

  beforeAll(async () => {
    backend = await createTestBackend();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  const documentOf = async (env: Record<string, string>): Promise<OpenApiDocument> => {
    const identity = createTestIdentity(backend, { env });
    const app = await buildIdentityApp(backend, identity);
    try {
      const answer = await app.inject({ url: '/v3/openapi.json' });
      expect(answer.statusCode).toBe(200);
      return answer.json() as OpenApiDocument;
    } finally {
      await app.close();
      await identity.close();
    }
  };

  it('offers leak reports and their signature only where they are set up, the operation requiring it there', async () => {
    const without = await documentOf({});
    expect(Object.keys(without.components.securitySchemes).sort()).toEqual(['accessToken', 'apiKey']);
    expect(without.paths['/v3/identity/api-keys/leaks']).toBeUndefined();

    const withLeaks = await documentOf({ PLAYBOOK_LEAK_REPORT_KEYS_URL: 'https://keys.example.com/leaks' });
    expect(Object.keys(withLeaks.components.securitySchemes).sort()).toEqual([
      'accessToken',
      'apiKey',
      'leakReportSignature',
    ]);
    expect(withLeaks.paths['/v3/identity/api-keys/leaks']?.post?.security).toEqual([
      { leakReportSignature: [] },
    ]);
  });

  it("says where access tokens' keys come from: here, the deployment's own signer", async () => {
    const document = await documentOf({});
    const description = document.components.securitySchemes.accessToken?.description;
    expect(description).toContain("signed by this deployment's own key (`playbook token` mints one)");
    expect(description).not.toContain('identity provider');
  });

  it("says where access tokens' keys come from: with a JWKS URL, the identity provider's, and no playbook token", async () => {
    const jwks = new JwksServer();
    const url = await jwks.start();
    try {
      const document = await documentOf({ PLAYBOOK_JWKS_URL: url });
      const description = document.components.securitySchemes.accessToken?.description;
      expect(description).toContain(
        'signed by the identity provider whose keys this deployment reads from its JWKS URL',
      );
      expect(description).not.toContain('playbook token');
      expect(description).not.toContain(url);
      // Both schemes stay offered: an identity provider's tokens manage keys as the signer's do.
      expect(Object.keys(document.components.securitySchemes).sort()).toEqual(['accessToken', 'apiKey']);
    } finally {
      await jwks.stop();
    }
  });
});
