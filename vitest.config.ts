import { configDefaults, defineConfig } from 'vitest/config';

/**
 * One suite, every backend. `embedded` runs every test on SQLite and a local directory. `production`
 * runs the suites that build their storage with `createTestBackend()` again, on PostgreSQL, S3 and
 * Redis servers that its globalSetup starts (test/helpers/servers.ts); pure unit tests run once.
 * A `*.production.test.ts` file is about a production backend itself (outages, query plans on
 * PostgreSQL) and runs in the production project only. `once` holds what CI runs once, on one Node
 * version only: the console's tests in a real browser.
 */
const backendSuites = ['http', 'import', 'identity', 'auth', 'store', 'multi-instance'].map(
  (dir) => `test/${dir}/**/*.test.ts`,
);

export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 20_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'embedded',
          include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
          exclude: [...configDefaults.exclude, '**/*.production.test.ts', 'test/once/**'],
        },
      },
      {
        // Tests that need one run per CI run, not one per Node version: the console in a real browser
        // (D33), which starts built services of its own and drives Chromium.
        extends: true,
        test: {
          name: 'once',
          include: ['test/once/**/*.test.ts'],
          testTimeout: 60_000,
          // One browser at a time: each file starts its own services and a Chromium.
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          name: 'production',
          include: backendSuites,
          globalSetup: ['test/helpers/servers.ts'],
          env: {
            // The SDK's default chain finds the S3 test server's credentials here first, before any
            // profile or role of the developer's; every S3 endpoint in the suite is on 127.0.0.1.
            AWS_ACCESS_KEY_ID: 'S3RVER',
            AWS_SECRET_ACCESS_KEY: 'S3RVER',
            AWS_REGION: 'us-east-1',
            AWS_EC2_METADATA_DISABLED: 'true',
            AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
          },
        },
      },
    ],
  },
});
