import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../../src/auth/principal.js';
import { PlaybookService, type PositionsMemo } from '../../src/catalog/playbook-service.js';
import type { ListPositions } from '../../src/catalog/read-repository.js';
import { ForbiddenError, NotFoundError } from '../../src/foundation/errors.js';
import type { ResourceKind } from '../../src/schemas/playbook.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { type GivenResource, givenAccount, givenCatalog, givenResource } from '../helpers/fixtures.js';

/**
 * The read side on its own (catalog/playbook-service.ts): it answers domain values, never HTTP, and
 * says with whom each is shared (its audience, D5/D6) and which namespaces of the change log it is made
 * of (D26), which is all the edge needs to keep answers in memory safely.
 */

function principal(accountId: string | null, plan = 'free'): Principal {
  return {
    accountId,
    plan,
    scopes: new Set(['playbook:read']),
    credential: { kind: 'api-key', keyId: `k-${accountId ?? 'none'}-${plan}` },
    restrictions: null,
  };
}

describe('the read side: values, audiences and namespaces', () => {
  let backend: TestBackend;
  let reads: PlaybookService;
  let open: GivenResource;
  let proOnly: GivenResource;
  let acmeRunbook: GivenResource;

  beforeAll(async () => {
    backend = await createTestBackend();
    const db = backend.databases.primary;
    await givenAccount(db, 'acme', 'free');
    await givenAccount(db, 'globex', 'pro');
    const handbook = await givenCatalog(db, { slug: 'handbook' });
    open = await givenResource(backend, handbook, {
      slug: 'open',
      versions: [{ version: '1', content: 'open to all' }],
    });
    proOnly = await givenResource(backend, handbook, {
      slug: 'pro-only',
      facets: { planAccess: ['pro'] },
      versions: [{ version: '1', content: 'for pro' }],
    });
    const runbooks = await givenCatalog(db, { slug: 'runbooks', accountId: 'acme' });
    acmeRunbook = await givenResource(backend, runbooks, {
      slug: 'deploy',
      kind: 'document',
      versions: [
        { version: '1', content: 'first' },
        { version: '2', content: 'second' },
      ],
    });
    reads = new PlaybookService(backend.databases.reader, backend.content);
  });

  afterAll(async () => {
    await backend?.cleanup();
  });

  it("a service Resource is the plan's to share and made of svc; an account's is the account's alone", async () => {
    const service = await reads.getResource(principal('acme'), open.id);
    expect(service.value.slug).toBe('open');
    expect(service.value.currentVersion.content).toBe('open to all');
    expect(service.audience).toEqual({ kind: 'service', plan: 'free' });
    expect(service.namespaces).toEqual(['svc']);

    const own = await reads.getResource(principal('acme'), acmeRunbook.id);
    expect(own.value.humanRef).toBe('org/runbooks/deploy');
    expect(own.audience).toEqual({ kind: 'account', accountId: 'acme' });
    expect(own.namespaces).toEqual(['acme']);
  });

  it('refuses in domain terms: another account sees nothing (not found), a plan gate is forbidden', async () => {
    await expect(reads.getResource(principal('globex', 'pro'), acmeRunbook.id)).rejects.toBeInstanceOf(
      NotFoundError,
    );
    await expect(reads.getResource(principal(null), acmeRunbook.id)).rejects.toBeInstanceOf(NotFoundError);
    const gated = reads.getResource(principal('acme', 'free'), proOnly.id);
    await expect(gated).rejects.toBeInstanceOf(ForbiddenError);
    await expect(gated).rejects.toMatchObject({ reason: 'plan_required' });
    const allowed = await reads.getResource(principal('globex', 'pro'), proOnly.id);
    expect(allowed.audience).toEqual({ kind: 'service', plan: 'pro' });
  });

  it("lists say whose view they are: the account's with its Catalogs, every caller's for the service's alone", async () => {
    const mixed = await reads.listCatalogs(principal('acme'), {});
    expect(mixed.value.data.map((catalog) => catalog.humanRef)).toEqual(['svc/handbook', 'org/runbooks']);
    expect(mixed.audience).toEqual({ kind: 'account', accountId: 'acme' });
    expect(mixed.namespaces).toEqual(['svc', 'acme']);
    expect(reads.catalogsAudience(principal('acme'), {})).toEqual(mixed.audience);

    const serviceOnly = await reads.listCatalogs(principal('acme'), { sourceScope: ['svc', 'svc'] });
    expect(serviceOnly.value.data.map((catalog) => catalog.humanRef)).toEqual(['svc/handbook']);
    expect(serviceOnly.audience).toBeNull();
    expect(serviceOnly.namespaces).toEqual(['svc']);

    const noAccount = await reads.listCatalogs(principal(null, 'pro'), {});
    expect(noAccount.audience).toEqual({ kind: 'caller', plan: 'pro', accountId: null });
    expect(noAccount.namespaces).toEqual(['svc']);
  });

  it('a list of Resources reads its positions once through the memo it is given, and keeps them by namespace', async () => {
    const kept: { catalogId: string; kinds: readonly ResourceKind[]; namespaces: readonly string[] }[] = [];
    let held: ListPositions | undefined;
    const memo: PositionsMemo = {
      held: () => held,
      keep: (catalogId, kinds, positions, namespaces) => {
        kept.push({ catalogId, kinds, namespaces });
        held = positions;
      },
    };
    const first = await reads.listResources(
      principal('acme'),
      { owner: 'org', catalogSlug: 'runbooks' },
      {},
      memo,
    );
    expect(first.value.data.map((item) => item.slug)).toEqual(['deploy']);
    expect(first.value.meta.total).toBe(1);
    expect(first.audience).toEqual({ kind: 'account', accountId: 'acme' });
    expect(first.namespaces).toEqual(['acme']);
    expect(kept).toHaveLength(1);
    expect(kept[0]!.namespaces).toEqual(['acme']);
    expect(held?.total).toBe(1);

    const again = await reads.listResources(
      principal('acme'),
      { owner: 'org', catalogSlug: 'runbooks' },
      {},
      memo,
    );
    expect(again.value).toEqual(first.value);
    expect(kept).toHaveLength(1);

    const service = await reads.listResources(
      principal('globex', 'pro'),
      { owner: 'svc', catalogSlug: 'handbook' },
      {},
    );
    expect(service.value.data.map((item) => item.slug)).toEqual(['open', 'pro-only']);
    expect(service.audience).toBeNull();
    expect(service.namespaces).toEqual(['svc']);
    await expect(
      reads.listResources(principal('globex', 'pro'), { owner: 'org', catalogSlug: 'runbooks' }, {}),
    ).rejects.toBeInstanceOf(NotFoundError);
  });

  it('a version is read without its content, which is loaded only when asked for', async () => {
    const [older, current] = acmeRunbook.versions;
    const seen = await reads.getVersion(principal('acme'), acmeRunbook.id, older!.id);
    expect(seen.value.withoutContent.version).toBe('1');
    expect(seen.value.withoutContent.status).toBe('superseded');
    expect(seen.value.withoutContent.content).toBe('');
    expect(seen.value.withoutContent.contentHash).toBe(older!.contentHash);
    expect(await seen.value.content()).toBe('first');
    expect(seen.audience).toEqual({ kind: 'account', accountId: 'acme' });
    expect(seen.namespaces).toEqual(['acme']);

    const history = await reads.listVersions(principal('acme'), acmeRunbook.id, {});
    expect(history.value.data.map((version) => version.id)).toEqual([current!.id, older!.id]);
    expect(history.namespaces).toEqual(['acme']);
    await expect(
      reads.getVersion(principal('globex', 'pro'), acmeRunbook.id, older!.id),
    ).rejects.toBeInstanceOf(NotFoundError);
  });
});
