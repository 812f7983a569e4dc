import path from 'node:path';

/**
 * The folder of this package (where package.json is), whether the code runs compiled from `dist/` or
 * from `src/` under the tests: both are one level below it.
 */
export const PROJECT_ROOT = path.resolve(import.meta.dirname, '..');
