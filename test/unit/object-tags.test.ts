import { describe, expect, it } from 'vitest';
import {
  type CatalogTagRow,
  catalogTag,
  type ResourceTagRow,
  resourceTag,
  type VersionTagRow,
} from '../../src/catalog/object-tags.js';

/** D29: a version tag changes with every field its object's answers show, and only with those. */
describe('version tags of Catalogs and Resources', () => {
  const resource: ResourceTagRow = {
    id: '01900000-0000-7000-8000-000000000001',
    slug: 'intro',
    kind: 'document',
    title: 'Intro',
    status: 'active',
    description: null,
    facets: null,
    manifest: '{}',
    current_version_id: '01900000-0000-7000-8000-000000000002',
    updated_at: '2026-01-01T00:00:00.000Z',
    archived_at: null,
  };
  const version: VersionTagRow = {
    id: '01900000-0000-7000-8000-000000000002',
    status: 'published',
    published_at: '2026-01-01T00:00:00.000Z',
    superseded_at: null,
    archived_at: null,
  };

  it("a Resource's tag moves with each field of the Resource and of its current version", () => {
    const tag = resourceTag(resource, version);
    expect(tag).toMatch(/^r[A-Za-z0-9_-]{32}$/);
    expect(resourceTag({ ...resource }, { ...version })).toBe(tag);
    const changes: [Partial<ResourceTagRow>, Partial<VersionTagRow>][] = [
      [{ title: 'Intro!' }, {}],
      // The same instant, another field: two writes in one millisecond still differ.
      [{ description: 'About' }, {}],
      [{ description: '' }, {}],
      [{ facets: '{"channel":["web"]}' }, {}],
      [{ manifest: '{"a":1}' }, {}],
      [{ status: 'archived', archived_at: '2026-01-02T00:00:00.000Z' }, {}],
      [{ kind: 'policy' }, {}],
      [{}, { status: 'superseded', superseded_at: '2026-01-02T00:00:00.000Z' }],
    ];
    const tags = changes.map(([r, v]) => resourceTag({ ...resource, ...r }, { ...version, ...v }));
    expect(new Set([tag, ...tags]).size).toBe(changes.length + 1);
  });

  it("a Catalog's tag moves with its row and with the last change to its namespace's Catalogs (D30)", () => {
    const catalog: CatalogTagRow = {
      id: '01900000-0000-7000-8000-000000000010',
      slug: 'handbook',
      name: 'Handbook',
      status: 'active',
      description: null,
      facets: null,
      current_version_id: null,
      updated_at: '2026-01-01T00:00:00.000Z',
      archived_at: null,
    };
    const tag = catalogTag(catalog, 41);
    expect(tag).toMatch(/^c[A-Za-z0-9_-]{32}$/);
    expect(catalogTag({ ...catalog }, 41)).toBe(tag);
    const others = [
      catalogTag({ ...catalog, name: 'Book' }, 41),
      catalogTag({ ...catalog, current_version_id: '01900000-0000-7000-8000-000000000011' }, 41),
      catalogTag({ ...catalog, updated_at: '2026-01-02T00:00:00.000Z' }, 41),
      catalogTag(catalog, 42),
      catalogTag(catalog, 4),
      // A description cannot pass for the change's number.
      catalogTag({ ...catalog, description: '1' }, 4),
    ];
    expect(new Set([tag, ...others]).size).toBe(others.length + 1);
  });
});
