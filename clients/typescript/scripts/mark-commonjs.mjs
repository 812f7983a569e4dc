// The CommonJS build lives in dist/cjs, under a package whose own package.json says "type": "module":
// this file beside it tells Node and TypeScript that the .js and .d.ts files there are CommonJS.
// Written only when it differs, so that a build running beside a reader never leaves it half-written.
import fs from 'node:fs';

const file = new URL('../dist/cjs/package.json', import.meta.url);
const text = `${JSON.stringify({ type: 'commonjs' })}\n`;
if (!fs.existsSync(file) || fs.readFileSync(file, 'utf8') !== text) fs.writeFileSync(file, text);
