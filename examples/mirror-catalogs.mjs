#!/usr/bin/env node
// Mirrors the current content of every Resource of every Catalog the key can read into a folder:
//   <folder>/<owner>/<catalogSlug>/<resourceSlug>.<ext>
// Usage: PLAYBOOK_API_KEY=svc_sk_… PLAYBOOK_URL=http://127.0.0.1:8080 node examples/mirror-catalogs.mjs ./mirror
// Reads revalidate with ETags, so a second run in the same process fetches only what changed.
import fs from 'node:fs/promises';
import path from 'node:path';
import { Playbook, PlaybookError } from '@playbook/client';

const EXTENSIONS = { 'text/markdown': '.md', 'application/json': '.json', 'text/plain': '.txt' };

const folder = process.argv[2];
if (!folder || !process.env.PLAYBOOK_API_KEY) {
  console.error('usage: PLAYBOOK_API_KEY=… [PLAYBOOK_URL=…] node examples/mirror-catalogs.mjs <folder>');
  process.exit(2);
}

const playbook = new Playbook({
  apiKey: process.env.PLAYBOOK_API_KEY,
  baseUrl: process.env.PLAYBOOK_URL ?? 'http://127.0.0.1:8080',
  cache: true,
});

try {
  let written = 0;
  for await (const catalog of playbook.catalogs.iterate({ pageSize: 100 })) {
    const dir = path.join(folder, catalog.owner, catalog.slug);
    await fs.mkdir(dir, { recursive: true });
    for await (const item of playbook.resources.iterate(catalog.owner, catalog.slug, { pageSize: 100 })) {
      const { currentVersion } = await playbook.resources.get(item.id);
      const extension = EXTENSIONS[currentVersion.mediaType.split(';')[0]] ?? '.txt';
      await fs.writeFile(path.join(dir, `${item.slug}${extension}`), currentVersion.content);
      written++;
    }
  }
  console.log(`mirrored ${written} resources into ${folder}`);
} catch (error) {
  if (!(error instanceof PlaybookError)) throw error;
  console.error(`mirror failed: ${error.message}`);
  process.exit(1);
}
