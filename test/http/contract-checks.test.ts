import { describe, expect, it } from 'vitest';
import {
  checkCatalog,
  checkPage,
  checkResourceDetail,
  checkResourceListItem,
  checkVersionSummary,
  isCounter,
  isDateTime,
  isHash,
  isSlug,
  isUuid,
} from '../helpers/contract.js';

/**
 * The shape checks every HTTP suite relies on must themselves tell right from wrong; otherwise a
 * passing shape test proves nothing.
 */

describe('contract checks: formats of contract.md §2', () => {
  it.each([
    '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
    '0190A1B2-C3D4-7E5F-BA9B-0C1D2E3F4A5B',
    '123e4567-e89b-12d3-a456-426614174000',
    '00000000-0000-0000-0000-000000000000',
    'ffffffff-ffff-ffff-ffff-ffffffffffff',
    'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF',
  ])('uuid %s is accepted', (value) => expect(isUuid(value)).toBe(true));

  it.each([
    ['version digit 0', '0190a1b2-c3d4-0e5f-8a9b-0c1d2e3f4a5b'],
    ['version digit 9', '0190a1b2-c3d4-9e5f-8a9b-0c1d2e3f4a5b'],
    ['variant c', '0190a1b2-c3d4-7e5f-ca9b-0c1d2e3f4a5b'],
    ['variant 7', '0190a1b2-c3d4-7e5f-7a9b-0c1d2e3f4a5b'],
    ['no hyphens', '0190a1b2c3d47e5f8a9b0c1d2e3f4a5b'],
    ['braces', '{0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b}'],
    ['too short', '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5'],
    ['non-hex', '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g'],
    ['not a string', 42],
  ])('uuid with %s is refused', (_why, value) => expect(isUuid(value)).toBe(false));

  it.each([
    '2024-02-29T00:00:00Z',
    '2000-02-29T12:30:00.123456Z',
    '2026-01-31T23:59:59.999Z',
    '2026-04-30T08:15Z',
    '2016-12-31T23:59:60Z',
  ])('date-time %s is accepted', (value) => expect(isDateTime(value)).toBe(true));

  it.each([
    ['a non-leap 29 February', '2025-02-29T00:00:00Z'],
    ['29 February of a century year', '1900-02-29T00:00:00Z'],
    ['31 April', '2026-04-31T00:00:00Z'],
    ['month 13', '2026-13-01T00:00:00Z'],
    ['day 0', '2026-01-00T00:00:00Z'],
    ['hour 24', '2026-01-01T24:00:00Z'],
    ['minute 60', '2026-01-01T10:60:00Z'],
    ['a leap second not at 23:59', '2026-01-01T10:00:60Z'],
    ['an offset instead of Z', '2026-01-01T10:00:00+00:00'],
    ['no zone', '2026-01-01T10:00:00'],
    ['lowercase z', '2026-01-01T10:00:00z'],
    ['a space for T', '2026-01-01 10:00:00Z'],
    ['a date only', '2026-01-01'],
  ])('date-time with %s is refused', (_why, value) => expect(isDateTime(value)).toBe(false));

  it('slugs: lowercase groups joined by single hyphens, 1-120 (facet values 1-80)', () => {
    for (const good of ['a', 'handbook', 'web-2', '2024-q1', 'a'.repeat(120)])
      expect(isSlug(good)).toBe(true);
    for (const bad of ['', 'A', 'a--b', '-a', 'a-', 'a_b', 'a b', 'é', 'a'.repeat(121)]) {
      expect(isSlug(bad)).toBe(false);
    }
    expect(isSlug('a'.repeat(80), 80)).toBe(true);
    expect(isSlug('a'.repeat(81), 80)).toBe(false);
  });

  it('hashes are 32-128 characters; counters are integers 0 to 2^53-1', () => {
    expect(isHash('a'.repeat(32))).toBe(true);
    expect(isHash('a'.repeat(128))).toBe(true);
    expect(isHash('a'.repeat(31))).toBe(false);
    expect(isHash('a'.repeat(129))).toBe(false);
    expect(isCounter(0)).toBe(true);
    expect(isCounter(Number.MAX_SAFE_INTEGER)).toBe(true);
    for (const bad of [-1, 1.5, Number.MAX_SAFE_INTEGER + 1, '3', Number.NaN])
      expect(isCounter(bad)).toBe(false);
  });
});

describe('contract checks: objects of contract.md §2', () => {
  const version = {
    id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
    version: '1.0.0',
    contentHash: 'a'.repeat(64),
    contentSizeBytes: 10,
    mediaType: 'text/markdown',
    storageBackend: 'database-text',
    status: 'published',
  };
  const resource = {
    id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c',
    catalogId: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d',
    catalogHumanRef: 'svc/handbook',
    sourceScope: 'svc',
    slug: 'onboarding',
    humanRef: 'svc/handbook/onboarding',
    kind: 'document',
    title: 'Onboarding',
    status: 'active',
    manifest: {},
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };
  const catalog = {
    id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d',
    sourceScope: 'svc',
    owner: 'svc',
    slug: 'handbook',
    humanRef: 'svc/handbook',
    name: 'Handbook',
    status: 'active',
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
  };

  it('accepts well-formed objects', () => {
    expect(checkCatalog(catalog, 'c')).toEqual([]);
    expect(checkResourceListItem({ ...resource, currentVersion: version }, 'r')).toEqual([]);
    expect(
      checkResourceDetail({ ...resource, currentVersion: { ...version, manifest: {}, content: '' } }, 'r'),
    ).toEqual([]);
  });

  it('refuses unknown fields, nulls for optional fields, and missing required ones', () => {
    expect(checkCatalog({ ...catalog, accountId: 'acme' }, 'c')).toEqual([
      'c.accountId: is not a field of the contract',
    ]);
    expect(checkCatalog({ ...catalog, description: null }, 'c')).toHaveLength(1);
    const { name: _name, ...nameless } = catalog;
    expect(checkCatalog(nameless, 'c')).toEqual(['c.name: is required']);
    expect(checkVersionSummary({ ...version, storageKey: 'ab/abcd' }, 'v')).toHaveLength(1);
  });

  it('refuses manifest/content in a list item version and their absence in a detail', () => {
    expect(checkResourceListItem({ ...resource, currentVersion: { ...version, content: 'x' } }, 'r')).toEqual(
      ['r.currentVersion.content: must be absent'],
    );
    expect(checkResourceDetail({ ...resource, currentVersion: version }, 'r')).toEqual([
      'r.currentVersion.manifest: is required',
      'r.currentVersion.content: is required',
    ]);
    expect(checkResourceDetail(resource, 'r')).toEqual(['r.currentVersion: is required']);
  });

  it('refuses out-of-bound strings and self-contradicting references', () => {
    expect(checkCatalog({ ...catalog, name: 'n'.repeat(161) }, 'c')).toHaveLength(1);
    expect(checkCatalog({ ...catalog, description: 'd'.repeat(1001) }, 'c')).toHaveLength(1);
    expect(checkCatalog({ ...catalog, humanRef: 'org/handbook' }, 'c')).toHaveLength(1);
    expect(checkResourceListItem({ ...resource, title: '' }, 'r')).toHaveLength(1);
    expect(checkResourceListItem({ ...resource, humanRef: 'svc/other/onboarding' }, 'r')).toHaveLength(1);
    expect(checkResourceListItem({ ...resource, facets: { planAccess: ['Pro'] } }, 'r')).toHaveLength(1);
    expect(checkResourceListItem({ ...resource, facets: { colour: ['red'] } }, 'r')).toHaveLength(1);
  });

  it('refuses an envelope whose meta disagrees with itself', () => {
    expect(
      checkPage({ data: [], meta: { page: 1, pageSize: 20, pageCount: 0, total: 0 } }, checkCatalog),
    ).toEqual([]);
    expect(
      checkPage({ data: [], meta: { page: 1, pageSize: 20, pageCount: 1, total: 3 } }, checkCatalog),
    ).toEqual(['page.data: has 0 items, expected 3']);
    expect(
      checkPage({ data: [], meta: { page: 1, pageSize: 2, pageCount: 1, total: 3 } }, checkCatalog),
    ).toContain('page.meta.pageCount: is not ceil(total / pageSize)');
    expect(
      checkPage({ data: [], meta: { page: 0, pageSize: 2, pageCount: 0, total: 0 } }, checkCatalog),
    ).toHaveLength(1);
  });
});
