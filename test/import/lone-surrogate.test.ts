import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ImportValidationError } from '../../src/import/import-tree.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { catalogJson, newTreeDir, resourceJson, runImport, T1, writeTree } from './support.js';

/**
 * D21 through `playbook import`: a file's JSON may escape a lone UTF-16 surrogate (`"\ud800"`) while
 * being valid UTF-8; such text is refused like a control character, naming the file and the field.
 */

let backend: TestBackend;
let dir: string;
beforeEach(async () => {
  backend = await createTestBackend();
  dir = await newTreeDir(backend);
});
afterEach(async () => {
  await backend.cleanup();
});

async function problemsOf(): Promise<string[]> {
  const error = await runImport(backend, dir, { at: T1 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ImportValidationError);
  return [...(error as ImportValidationError).problems];
}

const ONE_LINE =
  'must be one line of text, without control characters, direction overrides or unpaired surrogates';
const NAME =
  'must be one line of text, not blank, without control characters, direction overrides or unpaired surrogates';
const MULTI_LINE =
  'must not hold control characters (but tab and line breaks), direction overrides or unpaired surrogates';

describe('D21: lone surrogates in import files', () => {
  it.each([
    ['a lone high surrogate', '\ud800'],
    ['a lone low surrogate', '\udc00'],
    ['a high surrogate between letters', 'a\ud800b'],
  ])('refuses %s in every text field, naming the file and the field', async (_what, text) => {
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ name: text, version: text, description: text }),
      'handbook/resources/onboarding.json': resourceJson({
        title: text,
        version: text,
        mediaType: text,
        description: `first line\n${text}`,
      }),
    });
    // The file holds the escape, as JSON.stringify writes it: valid UTF-8 throughout.
    const written = await fs.readFile(path.join(dir, 'handbook/catalog.json'), 'utf8');
    expect(written).toMatch(/\\ud[8c]00/);
    expect(await problemsOf()).toEqual([
      `handbook/catalog.json: name: ${NAME}`,
      `handbook/catalog.json: version: ${ONE_LINE}`,
      `handbook/catalog.json: description: ${MULTI_LINE}`,
      `handbook/resources/onboarding.json: title: ${NAME}`,
      `handbook/resources/onboarding.json: version: ${ONE_LINE}`,
      `handbook/resources/onboarding.json: mediaType: ${NAME}`,
      `handbook/resources/onboarding.json: description: ${MULTI_LINE}`,
    ]);
  });

  it('imports surrogate pairs (emoji) as they are', async () => {
    const emoji = 'Hand 😀 book 🧭';
    await writeTree(dir, {
      'handbook/catalog.json': catalogJson({ name: emoji, description: `${emoji}\n${emoji}` }),
      'handbook/resources/onboarding.json': resourceJson({ title: emoji, description: emoji }),
    });
    const report = await runImport(backend, dir, { at: T1 });
    expect(report.counts.resourcesCreated).toBe(1);
    const catalog = await backend.databases.primary
      .selectFrom('catalogs')
      .selectAll()
      .executeTakeFirstOrThrow();
    expect(catalog).toMatchObject({ name: emoji, description: `${emoji}\n${emoji}` });
  });
});
