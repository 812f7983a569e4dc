import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { onePerField } from '../../src/http/problem.js';
import { schemaProblems } from '../../src/import/schema-problems.js';
import { Facets, Slug } from '../../src/schemas/common.js';
import { PublishedResource } from '../../src/schemas/publish.js';
import { compileCheck, fieldProblems, problemsOf } from '../../src/schemas/schema-check.js';

/**
 * The one translator of schema errors (schemas/schema-check.ts): every door names a field as its
 * author writes it and says what it must be in the same words; each door only places the problem
 * (a 400's `errors[]`, an import's `file: field: problem` line).
 */

const resourceCheck = compileCheck(PublishedResource, true);

const badResource = {
  slug: 'Not A Slug',
  kind: 'poem',
  title: '',
  version: '1',
  mediaType: 'text/markdown',
  facets: { planAccess: [''], colour: ['red'] },
  manifest: [],
  content: 7,
  extra: true,
};

describe('schema problems: one translator for every door', () => {
  it('names each field once, as its author writes it, with what it must be', () => {
    expect(problemsOf(resourceCheck, badResource)).toEqual(
      expect.arrayContaining([
        {
          name: 'extra',
          message: expect.stringMatching(/^is not a known field \(known: slug, kind, title, /),
        },
        {
          name: 'slug',
          message: 'must be a slug: lowercase letters and digits in groups joined by single hyphens',
        },
        { name: 'kind', message: expect.stringMatching(/^must be one of document, topic, /) },
        { name: 'title', message: 'must not be empty' },
        { name: 'facets.planAccess[0]', message: 'must not be empty' },
        {
          name: 'facets.colour',
          message: 'is not a known field (known: capability, channel, framework, planAccess, technology)',
        },
        { name: 'manifest', message: 'must be a JSON object' },
        { name: 'content', message: 'must be a string' },
      ]),
    );
    // One problem per field, though a field breaks several keywords (an empty slug-shaped title).
    const names = problemsOf(resourceCheck, badResource).map((problem) => problem.name);
    expect(new Set(names).size).toBe(names.length);
    expect(problemsOf(resourceCheck, { ...badResource, slug: 'fine' }).map((p) => p.name)).not.toContain(
      'slug',
    );
  });

  it('says what a too long, too short or missing value must be', () => {
    const check = compileCheck(
      Type.Object({ code: Slug, tags: Type.Array(Type.String(), { minItems: 2, maxItems: 3 }) }),
      true,
    );
    expect(problemsOf(check, { code: 'x'.repeat(121), tags: ['a'] })).toEqual([
      { name: 'code', message: 'must be at most 120 characters' },
      { name: 'tags', message: 'must hold at least 2 items' },
    ]);
    expect(problemsOf(check, {})).toEqual([
      { name: 'code', message: 'is required' },
      { name: 'tags', message: 'is required' },
    ]);
    expect(problemsOf(check, [])).toEqual([{ name: '', message: 'must be a JSON object' }]);
    expect(problemsOf(check, { code: 'ok', tags: ['a', 'b'] })).toEqual([]);
  });

  it('names keys that are no identifiers in brackets, and list elements by index', () => {
    const check = compileCheck(Type.Object({ facets: Facets }), true);
    expect(problemsOf(check, { facets: { 'a b': ['x'], channel: ['ok', 'Bad'] } })).toEqual([
      { name: 'facets["a b"]', message: expect.stringMatching(/^is not a known field/) },
      { name: 'facets.channel[1]', message: expect.stringMatching(/^must be a slug/) },
    ]);
  });

  it('a query parameter is named as sent, its element in the message', () => {
    const problems = fieldProblems(
      [{ instancePath: '/kind/1', keyword: 'enum', params: { allowedValues: ['a', 'b'] } }],
      { parameters: true },
    );
    expect(problems).toEqual([{ name: 'kind', message: 'element 2 must be one of a, b' }]);
    expect(
      fieldProblems(
        [{ instancePath: '', keyword: 'additionalProperties', params: { additionalProperty: 'x' } }],
        {
          parameters: true,
        },
      ),
    ).toEqual([{ name: 'x', message: 'is not a known parameter' }]);
  });

  it('the HTTP door and the import door say the same problem in their own terms', () => {
    resourceCheck(badResource);
    const errors = resourceCheck.errors ?? [];
    const http = onePerField('body', errors);
    const lines = schemaProblems(resourceCheck, badResource, 'handbook/resources/a.json');
    expect(lines).toHaveLength(http.length);
    for (const problem of http) {
      expect(problem.in).toBe('body');
      expect(lines).toContain(`handbook/resources/a.json: ${problem.name}: ${problem.message}`);
    }
  });
});
