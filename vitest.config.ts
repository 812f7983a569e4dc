import { configDefaults, defineConfig } from 'vitest/config';

/**
 * One suite, every backend. `embedded` runs every test on SQLite and a local directory. `production`
 * runs the suites that build their storage with `createTestBackend()` again, on PostgreSQL, S3 and
 * Redis servers that its globalSetup starts (test/helpers/servers.ts); pure unit tests run once.
 * A `*.production.test.ts` file is about a production backend itself (outages, query plans on
 * PostgreSQL) and runs in the production project only. `once` holds what is tested once per CI run,
 * not once per Node.js version: the container image, which carries a Node of its own, and the console
 * in a real browser, on the same servers as `production`.
 */
const backendSuites = ['http', 'import', 'identity', 'auth', 'store', 'multi-instance'].map(
  (dir) => `test/${dir}/**/*.test.ts`,
);

/**
 * The SDK's default chain finds the S3 test server's credentials here first, before any profile or role
 * of the developer's; every S3 endpoint in the suite is on 127.0.0.1.
 */
const productionEnv = {
  AWS_ACCESS_KEY_ID: 'S3RVER',
  AWS_SECRET_ACCESS_KEY: 'S3RVER',
  AWS_REGION: 'us-east-1',
  AWS_EC2_METADATA_DISABLED: 'true',
  AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
};

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
        extends: true,
        test: {
          name: 'production',
          include: backendSuites,
          globalSetup: ['test/helpers/servers.ts'],
          env: productionEnv,
        },
      },
      {
        extends: true,
        test: {
          name: 'once',
          include: ['test/once/**/*.test.ts'],
          testTimeout: 60_000,
          // One at a time: each file starts services of its own, and a Chromium or the image.
          fileParallelism: false,
          // The suite's servers, then the image, built before any test of it runs.
          globalSetup: ['test/helpers/servers.ts', 'test/once/build-image.ts'],
          env: productionEnv,
        },
      },
    ],
  },
});
