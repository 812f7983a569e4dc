import path from 'node:path';

/**
 * The folder of this package (where package.json is), whether the code runs compiled from `dist/` or
 * from `src/` under the tests: this module is two levels below it in both (`foundation/`).
 */
export const PROJECT_ROOT = path.resolve(import.meta.dirname, '..', '..');
