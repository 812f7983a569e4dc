import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ImportValidationError } from '../../src/import/import-tree.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import {
  catalogJson,
  dumpStorage,
  newTreeDir,
  resourceJson,
  runImport,
  sha256,
  T1,
  T2,
  writeTree,
} from './support.js';

let backend: TestBackend;
let dir: string;
beforeEach(async () => {
  backend = await createTestBackend();
  dir = await newTreeDir(backend);
});
afterEach(async () => {
  await backend.cleanup();
});

async function problemsOf(options: Parameters<typeof runImport>[2] = {}): Promise<string[]> {
  const error = await runImport(backend, dir, { at: T1, ...options }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ImportValidationError);
  const refused = error as ImportValidationError;
  expect(refused.name).toBe('ImportValidationError');
  expect(refused.message).toBe(
    `import refused: ${refused.problems.length} problem${refused.problems.length === 1 ? '' : 's'}`,
  );
  return [...refused.problems];
}

const SLUG_RULE = 'must be a slug: lowercase letters and digits in groups joined by single hyphens';

describe('D15 validation: one line per problem, naming file and field', () => {
  it('checks every field of catalog.json', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': {
        name: 'n'.repeat(161),
        version: '',
        status: 'retired',
        description: 'd'.repeat(1001),
        facets: { capability: ['Not_A_Slug', 'f'.repeat(81)], colour: ['red'] },
        owner: 'someone',
      },
    });
    expect(await problemsOf()).toEqual([
      'handbook/catalog.json: owner: is not a known field (known: name, version, status, description, facets)',
      'handbook/catalog.json: name: must be at most 160 characters',
      'handbook/catalog.json: version: must not be empty',
      'handbook/catalog.json: status: must be one of draft, active, archived',
      'handbook/catalog.json: description: must be at most 1000 characters',
      'handbook/catalog.json: facets.colour: is not a known field (known: capability, channel, framework, planAccess, technology)',
      `handbook/catalog.json: facets.capability[0]: ${SLUG_RULE}`,
      'handbook/catalog.json: facets.capability[1]: must be at most 80 characters',
    ]);
  });

  it('checks every field of a resource file', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/onboarding.json': {
        kind: 'essay',
        title: 't'.repeat(221),
        version: 'v'.repeat(81),
        mediaType: 'm'.repeat(121),
        status: 'live',
        description: 'd'.repeat(1001),
        facets: { planAccess: [''] },
        manifest: ['not', 'an', 'object'],
        storageBackend: 'floppy',
        content: 42,
        colour: 'blue',
      },
      'handbook/resources/untitled.json': {
        kind: 'document',
        version: '1',
        mediaType: 'text/plain',
        content: '',
      },
    });
    expect(await problemsOf()).toEqual([
      'handbook/resources/onboarding.json: colour: is not a known field (known: kind, title, version, mediaType, status, description, facets, manifest, storageBackend, content, contentFile)',
      'handbook/resources/onboarding.json: kind: must be one of document, topic, reference, team-member, workflow, lifecycle, integration, policy',
      'handbook/resources/onboarding.json: title: must be at most 220 characters',
      'handbook/resources/onboarding.json: version: must be at most 80 characters',
      'handbook/resources/onboarding.json: mediaType: must be at most 120 characters',
      'handbook/resources/onboarding.json: status: must be one of draft, active, archived',
      'handbook/resources/onboarding.json: description: must be at most 1000 characters',
      'handbook/resources/onboarding.json: facets.planAccess[0]: must not be empty',
      'handbook/resources/onboarding.json: manifest: must be a JSON object',
      'handbook/resources/onboarding.json: storageBackend: must be one of object-storage, database-text',
      'handbook/resources/onboarding.json: content: must be a string',
      'handbook/resources/untitled.json: title: is required',
    ]);
  });

  it('accepts every field at its limit', async () => {
    await writeTree(dir, {
      [`${'c'.repeat(120)}/catalog.json`]: catalogJson({
        name: 'n'.repeat(160),
        version: 'v'.repeat(80),
        description: 'd'.repeat(1000),
        facets: { technology: ['t'.repeat(80)] },
      }),
      [`${'c'.repeat(120)}/resources/${'r'.repeat(120)}.json`]: resourceJson({
        title: 't'.repeat(220),
        version: 'v'.repeat(80),
        mediaType: 'm'.repeat(120),
        description: 'd'.repeat(1000),
        facets: { capability: ['a'.repeat(80)] },
        content: '',
      }),
    });
    const report = await runImport(backend, dir, { at: T1 });
    expect(report.counts.resourcesCreated).toBe(1);
    const version = await backend.databases.primary
      .selectFrom('resource_versions')
      .selectAll()
      .executeTakeFirstOrThrow();
    expect(version).toMatchObject({ content_size_bytes: 0, content_hash: sha256('') });
  });

  it('checks folder and file names are slugs of 1-120 characters', async () => {
    await writeTree(dir, {
      'Handbook/catalog.json': catalogJson(),
      [`${'x'.repeat(121)}/catalog.json`]: catalogJson(),
      'guides/catalog.json': catalogJson(),
      'guides/resources/Read Me.json': resourceJson(),
      'guides/resources/double--hyphen.json': resourceJson(),
      [`guides/resources/${'r'.repeat(121)}.json`]: resourceJson(),
      'guides/resources/.json': resourceJson(),
    });
    expect(await problemsOf()).toEqual([
      `Handbook: folder name: ${SLUG_RULE}`,
      'guides/resources/Read Me.json: file name: ' + SLUG_RULE,
      'guides/resources/double--hyphen.json: file name: ' + SLUG_RULE,
      `guides/resources/${'r'.repeat(121)}.json: file name: must be at most 120 characters`,
      `${'x'.repeat(121)}: folder name: must be at most 120 characters`,
    ]);
  });

  it('reports unreadable JSON, missing catalog files and a missing content', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': '{ "name": "Handbook", ',
      'handbook/resources/array.json': '[1, 2]',
      'handbook/resources/bytes.json': Buffer.from([0x7b, 0xff, 0x7d]),
      'handbook/resources/empty.json': resourceJson({ content: undefined }),
      'handbook/resources/both.json': resourceJson({ contentFile: 'x.md' }),
      'handbook/resources/x.md': 'x',
      'guides/resources/a.json': resourceJson(),
    });
    const problems = await problemsOf();
    expect(problems).toHaveLength(6);
    expect(problems[0]).toBe('guides/catalog.json: is missing');
    expect(problems[1]).toMatch(/^handbook\/catalog\.json: is not valid JSON \(.+\)$/);
    expect(problems.slice(2)).toEqual([
      'handbook/resources/array.json: must be a JSON object',
      'handbook/resources/both.json: contentFile: give either content or contentFile, not both',
      'handbook/resources/bytes.json: is not valid UTF-8',
      'handbook/resources/empty.json: content: is required (or contentFile, a path relative to resources/)',
    ]);
  });

  it('#10 and D20: refuses content over PLAYBOOK_MAX_CONTENT_BYTES, inline or in a file, before reading a large file', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/exact.json': resourceJson({ content: 'e'.repeat(1000) }),
      'handbook/resources/inline.json': resourceJson({ content: 'i'.repeat(1001) }),
      'handbook/resources/file.json': resourceJson({ content: undefined, contentFile: 'files/big.md' }),
      'handbook/resources/files/big.md': 'b'.repeat(4000),
      'handbook/resources/multibyte.json': resourceJson({ content: 'é'.repeat(501) }),
    });
    const problems = await problemsOf({ maxContentBytes: 1000 });
    expect(problems).toEqual([
      'handbook/resources/file.json: contentFile: content is 4000 bytes; at most 1000 are accepted (PLAYBOOK_MAX_CONTENT_BYTES)',
      'handbook/resources/inline.json: content: content is 1001 bytes; at most 1000 are accepted (PLAYBOOK_MAX_CONTENT_BYTES)',
      'handbook/resources/multibyte.json: content: content is 1002 bytes; at most 1000 are accepted (PLAYBOOK_MAX_CONTENT_BYTES)',
    ]);
    expect((await runImport(backend, dir, { at: T1, maxContentBytes: 4000 })).counts.resourcesCreated).toBe(
      4,
    );
  });

  it('D20: refuses a Catalog folder holding more resource files than a Catalog may pin, reading none of them', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson(),
      'handbook/resources/b.json': resourceJson(),
      'handbook/resources/c.json': '{ not even JSON',
      'guides/catalog.json': catalogJson(),
      'guides/resources/a.json': resourceJson(),
    });
    const before = await dumpStorage(backend);
    expect(await problemsOf({ maxCatalogResources: 2 })).toEqual([
      'handbook/resources: holds 3 resource files; a Catalog holds at most 2',
    ]);
    expect(await dumpStorage(backend)).toEqual(before);
    const report = await runImport(backend, dir, { at: T1, maxCatalogResources: 3 }).catch((e: unknown) => e);
    // At the limit the folder is read, and its broken file is then reported.
    expect((report as ImportValidationError).problems).toEqual([
      expect.stringMatching(/^handbook\/resources\/c\.json: /),
    ]);
  });

  it('reports a tree that is not a folder', async () => {
    const file = path.join(dir, 'file.txt');
    await fs.writeFile(file, 'x');
    await expect(runImport(backend, file)).rejects.toMatchObject({ problems: [`${file}: is not a folder`] });
    const missing = path.join(dir, 'missing');
    await expect(runImport(backend, missing)).rejects.toMatchObject({
      problems: [`${missing}: cannot be read (ENOENT)`],
    });
  });

  it('skips dot entries, plain files beside catalogs and non-JSON files in resources/', async () => {
    await writeTree(dir, {
      'README.md': 'About this tree',
      '.git/catalog.json': 'not json',
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/.draft.json': 'not json',
      'handbook/resources/notes.md': 'notes',
      'handbook/resources/files/nested.json': 'not json',
      'empty/catalog.json': catalogJson({ name: 'Empty' }),
    });
    const report = await runImport(backend, dir, { at: T1 });
    expect(report.counts).toMatchObject({ catalogsCreated: 2, resourcesCreated: 0, resourceFilesRead: 0 });
  });

  it('refuses symbolic links as catalog folders, resources folders and resource files', async () => {
    const elsewhere = await newTreeDir(backend);
    await writeTree(elsewhere, {
      'catalog.json': catalogJson(),
      'resources/a.json': resourceJson(),
      'a.json': resourceJson(),
    });
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'guides/catalog.json': catalogJson(),
    });
    await fs.symlink(elsewhere, path.join(dir, 'linked'));
    await fs.mkdir(path.join(dir, 'handbook/resources'));
    await fs.symlink(path.join(elsewhere, 'a.json'), path.join(dir, 'handbook/resources/a.json'));
    await fs.symlink(path.join(elsewhere, 'resources'), path.join(dir, 'guides/resources'));
    expect(await problemsOf()).toEqual([
      'guides/resources: is a symbolic link; it must be a real folder',
      'handbook/resources/a.json: is a symbolic link; resource files must be real files',
      'linked: is a symbolic link; catalog folders must be real folders',
    ]);
  });
});

describe('D15 validation: contentFile stays inside its catalog folder', () => {
  it('reads contentFile relative to resources/, from anywhere inside the catalog folder', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/near.json': resourceJson({ content: undefined, contentFile: 'near.md' }),
      'handbook/resources/near.md': 'near',
      'handbook/resources/up.json': resourceJson({ content: undefined, contentFile: '../notes/up.md' }),
      'handbook/notes/up.md': '\uFEFFbom kept',
      'handbook/resources/linked.json': resourceJson({ content: undefined, contentFile: 'alias.md' }),
    });
    await fs.symlink(path.join(dir, 'handbook/notes/up.md'), path.join(dir, 'handbook/resources/alias.md'));
    const report = await runImport(backend, dir, { at: T1 });
    expect(report.counts.resourcesCreated).toBe(3);
    const hashes = await backend.databases.primary
      .selectFrom('resource_versions')
      .select('content_hash')
      .execute();
    expect(hashes.map((row) => row.content_hash).sort()).toEqual(
      [sha256('near'), sha256('\uFEFFbom kept'), sha256('\uFEFFbom kept')].sort(),
    );
  });

  it('refuses absolute paths, escapes by .. or by symbolic link, missing files, folders and non-UTF-8 bytes', async () => {
    const outside = await newTreeDir(backend);
    await writeTree(outside, { 'secret.md': 'secret', 'dir/secret.md': 'secret' });
    const contentFiles: Record<string, string> = {
      absolute: path.join(outside, 'secret.md'),
      parent: '../../outside.md',
      sibling: '../../guides/resources/page.md',
      itself: '..',
      'link-out': 'files/link-out.md',
      'link-dir': 'linked/secret.md',
      missing: 'files/nope.md',
      folder: 'files',
      latin1: 'files/latin1.md',
    };
    const files: Record<string, Record<string, unknown> | string | Buffer> = {
      'outside.md': 'outside the catalogs',
      'guides/catalog.json': catalogJson(),
      'guides/resources/page.md': 'a page of another catalog',
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/files/latin1.md': Buffer.from('caf\xe9', 'latin1'),
    };
    for (const [slug, contentFile] of Object.entries(contentFiles)) {
      files[`handbook/resources/${slug}.json`] = resourceJson({ content: undefined, contentFile });
    }
    await writeTree(dir, files);
    await fs.symlink(path.join(outside, 'secret.md'), path.join(dir, 'handbook/resources/files/link-out.md'));
    await fs.symlink(path.join(outside, 'dir'), path.join(dir, 'handbook/resources/linked'));

    const before = await dumpStorage(backend);
    expect(await problemsOf()).toEqual([
      'handbook/resources/absolute.json: contentFile: must be a path relative to resources/, not an absolute path',
      'handbook/resources/folder.json: contentFile: is not a file: files',
      'handbook/resources/itself.json: contentFile: must stay inside the catalog folder',
      'handbook/resources/latin1.json: contentFile: is not valid UTF-8: files/latin1.md',
      'handbook/resources/link-dir.json: contentFile: leads outside the catalog folder through a symbolic link',
      'handbook/resources/link-out.json: contentFile: leads outside the catalog folder through a symbolic link',
      'handbook/resources/missing.json: contentFile: no such file: files/nope.md',
      'handbook/resources/parent.json: contentFile: must stay inside the catalog folder',
      'handbook/resources/sibling.json: contentFile: must stay inside the catalog folder',
    ]);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('names a Windows-style absolute path as absolute too', async () => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson(),
      'handbook/resources/a.json': resourceJson({ content: undefined, contentFile: 'C:\\secrets\\a.md' }),
    });
    expect(await problemsOf()).toEqual([
      'handbook/resources/a.json: contentFile: must be a path relative to resources/, not an absolute path',
    ]);
  });
});

describe('D15 validation: all or nothing', () => {
  it('leaves storage untouched when one file in the middle of a tree is invalid', async () => {
    const resources: Record<string, Record<string, unknown>> = {};
    for (let i = 0; i < 40; i++) {
      resources[`handbook/resources/page-${String(i).padStart(2, '0')}.json`] = resourceJson({
        content: `page ${i}`,
      });
    }
    await writeTree(dir, { 'handbook/catalog.json': catalogJson(), ...resources });
    await runImport(backend, dir, { at: T1 });
    const before = await dumpStorage(backend);

    // Many valid changes (new versions, a new catalog, large content bound for the object store)
    // around one invalid file: none of them may land.
    const changed: Record<string, Record<string, unknown>> = {};
    for (let i = 0; i < 40; i++) {
      changed[`handbook/resources/page-${String(i).padStart(2, '0')}.json`] = resourceJson({
        version: '2.0.0',
        content: `page ${i}, revised ${'z'.repeat(i === 7 ? 70_000 : 0)}`,
      });
    }
    changed['handbook/resources/page-20.json'] = resourceJson({ version: '2.0.0', title: '' });
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ version: '2.0.0', name: 'Renamed' }),
      'another/catalog.json': catalogJson({ name: 'Another' }),
      'another/resources/big.json': resourceJson({ content: 'b'.repeat(100_000) }),
      ...changed,
    });
    expect(await problemsOf({ at: T2 })).toEqual([
      'handbook/resources/page-20.json: title: must not be empty',
    ]);
    expect(await dumpStorage(backend)).toEqual(before);
  });

  it('collects the problems of every file, not just the first', async () => {
    const files: Record<string, Record<string, unknown>> = { 'handbook/catalog.json': catalogJson() };
    for (let i = 0; i < 25; i++) files[`handbook/resources/bad-${i}.json`] = resourceJson({ kind: 'nope' });
    await writeTree(dir, files);
    const problems = await problemsOf();
    expect(problems).toHaveLength(25);
    expect(new Set(problems.map((line) => line.split(':')[0])).size).toBe(25);
  });
});
