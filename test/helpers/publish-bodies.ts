/** One Resource of a publishing body (D23), valid unless `overrides` make it otherwise. */
export function publishedResource(slug: string, overrides: Record<string, unknown> = {}) {
  return {
    slug,
    kind: 'document',
    title: `The ${slug}`,
    version: '1.0.0',
    mediaType: 'text/markdown',
    content: `# ${slug}\n`,
    ...overrides,
  };
}
