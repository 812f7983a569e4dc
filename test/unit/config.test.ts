import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DevTokenSigner } from '../../src/auth/dev-signer.js';
import { ConfigError, deploymentEnvironment, loadConfig } from '../../src/foundation/config.js';

describe('configuration (D13)', () => {
  it('has the documented defaults', () => {
    const config = loadConfig({});
    expect(config.port).toBe(8080);
    expect(config.host).toBe('127.0.0.1');
    expect(config.dataDir).toBe(path.resolve('./data'));
    expect(config.database).toEqual({ kind: 'sqlite', path: path.resolve('./data/playbook.sqlite') });
    expect(config.contentStore).toEqual({ kind: 'directory', path: path.resolve('./data/content') });
    expect(config.environment).toBe('test');
    expect(config.redisUrl).toBeUndefined();
    expect(config.jwt).toEqual({ accountsClaim: 'accounts', clockToleranceS: 0, maxTtlS: 86_400 });
    expect(config.maxKeysPerAccount).toBe(100);
    expect(config.rateLimit).toEqual({ max: 1200, windowMs: 60000, authFailureMax: 100 });
    expect(config.logLevel).toBe('info');
    expect(config.trustProxy).toBe(false);
    expect(config.timeouts).toEqual({ requestMs: 30_000, keepAliveMs: 72_000 });
    expect(config.answerCacheBytes).toBe(32 * 1024 * 1024);
    expect(config.shutdownDelayMs).toBe(0);
    expect(config.webhooks.concurrency).toBe(10);
    expect(config.webhooks.perEndpoint).toBe(2);
    expect(config.syncMaxWaiters).toBe(1000);
    expect(config.syncMaxWaitersPerKey).toBe(20);
    expect(config.webhooks.maxPendingPerEndpoint).toBe(10_000);
    expect(config.console).toEqual({ devSignInOpen: false });
  });

  it('reads every variable it documents', () => {
    const config = loadConfig({
      PORT: '9090',
      HOST: '0.0.0.0',
      PLAYBOOK_DATA_DIR: '/srv/playbook',
      PLAYBOOK_DATABASE_URL: 'postgres://app@db/playbook',
      PLAYBOOK_DATABASE_READ_URL: 'postgres://app@replica/playbook',
      PLAYBOOK_DATABASE_PREPARED_STATEMENTS: 'false',
      PLAYBOOK_CONTENT_STORE: 's3://content-bucket/playbook/v3/',
      PLAYBOOK_S3_ENDPOINT: 'http://127.0.0.1:9000',
      PLAYBOOK_ENVIRONMENT: 'live',
      PLAYBOOK_REDIS_URL: 'redis://cache:6379',
      PLAYBOOK_JWKS_URL: 'https://id.example/.well-known/jwks.json',
      PLAYBOOK_JWT_ISSUER: 'https://id.example/',
      PLAYBOOK_JWT_AUDIENCE: 'playbook',
      PLAYBOOK_JWT_ACCOUNTS_CLAIM: 'orgs',
      PLAYBOOK_JWT_CLOCK_TOLERANCE_S: '5',
      PLAYBOOK_JWT_MAX_TTL_S: '3600',
      PLAYBOOK_MAX_KEYS_PER_ACCOUNT: '10',
      PLAYBOOK_RATE_LIMIT_MAX: '50',
      PLAYBOOK_RATE_LIMIT_WINDOW_MS: '1000',
      PLAYBOOK_AUTH_FAILURE_MAX: '3',
      PLAYBOOK_TRUST_PROXY: '10.0.0.0/8,127.0.0.1',
      PLAYBOOK_REQUEST_TIMEOUT_MS: '5000',
      PLAYBOOK_KEEP_ALIVE_TIMEOUT_MS: '65000',
      PLAYBOOK_ANSWER_CACHE_BYTES: '0',
      PLAYBOOK_SHUTDOWN_DELAY_MS: '15000',
      PLAYBOOK_WEBHOOK_CONCURRENCY: '20',
      PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY: '5',
      PLAYBOOK_SYNC_MAX_WAITERS: '500',
      PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY: '5',
      PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT: '500',
      LOG_LEVEL: 'warn',
    });
    expect(config.port).toBe(9090);
    expect(config.host).toBe('0.0.0.0');
    expect(config.database).toEqual({
      kind: 'postgres',
      url: 'postgres://app@db/playbook',
      readUrl: 'postgres://app@replica/playbook',
      preparedStatements: false,
    });
    expect(config.contentStore).toEqual({
      kind: 's3',
      bucket: 'content-bucket',
      prefix: 'playbook/v3',
      endpoint: 'http://127.0.0.1:9000',
    });
    expect(config.environment).toBe('live');
    expect(config.redisUrl).toBe('redis://cache:6379');
    expect(config.jwt).toEqual({
      jwksUrl: 'https://id.example/.well-known/jwks.json',
      issuer: 'https://id.example/',
      audience: 'playbook',
      accountsClaim: 'orgs',
      clockToleranceS: 5,
      maxTtlS: 3600,
    });
    expect(config.maxKeysPerAccount).toBe(10);
    expect(config.rateLimit).toEqual({ max: 50, windowMs: 1000, authFailureMax: 3 });
    expect(config.trustProxy).toEqual(['10.0.0.0/8', '127.0.0.1']);
    expect(config.timeouts).toEqual({ requestMs: 5000, keepAliveMs: 65000 });
    expect(config.answerCacheBytes).toBe(0);
    expect(config.shutdownDelayMs).toBe(15000);
    expect(config.webhooks.concurrency).toBe(20);
    expect(config.webhooks.perEndpoint).toBe(5);
    expect(config.syncMaxWaiters).toBe(500);
    expect(config.syncMaxWaitersPerKey).toBe(5);
    expect(config.webhooks.maxPendingPerEndpoint).toBe(500);
    expect(config.logLevel).toBe('warn');
  });

  it.each([
    ['true', true],
    ['false', false],
    ['2', 2],
    ['10.0.0.0/8', ['10.0.0.0/8']],
    ['10.0.0.0/8, 127.0.0.1,fd00::/8', ['10.0.0.0/8', '127.0.0.1', 'fd00::/8']],
    ['loopback,uniquelocal', ['loopback', 'uniquelocal']],
    ['0.0.0.0/0', ['0.0.0.0/0']],
    ['::/128', ['::/128']],
    ['10.0.0.0/255.0.0.0', ['10.0.0.0/255.0.0.0']],
  ])('PLAYBOOK_TRUST_PROXY=%s', (value, expected) => {
    expect(loadConfig({ PLAYBOOK_TRUST_PROXY: value }).trustProxy).toEqual(expected);
  });

  it('keeps the reads built once prepared on PostgreSQL unless told not to (D30)', () => {
    expect(loadConfig({ PLAYBOOK_DATABASE_URL: 'postgres://app@db/playbook' }).database).toEqual({
      kind: 'postgres',
      url: 'postgres://app@db/playbook',
      preparedStatements: true,
    });
  });

  it('takes sqlite: URLs and a content directory', () => {
    expect(loadConfig({ PLAYBOOK_DATABASE_URL: 'sqlite:./x/db.sqlite' }).database).toEqual({
      kind: 'sqlite',
      path: path.resolve('./x/db.sqlite'),
    });
    expect(loadConfig({ PLAYBOOK_DATABASE_URL: 'sqlite::memory:' }).database).toEqual({
      kind: 'sqlite',
      path: ':memory:',
    });
    expect(loadConfig({ PLAYBOOK_CONTENT_STORE: '/var/lib/playbook' }).contentStore).toEqual({
      kind: 'directory',
      path: '/var/lib/playbook',
    });
    expect(loadConfig({ PLAYBOOK_CONTENT_STORE: 'file:///var/lib/playbook' }).contentStore).toEqual({
      kind: 'directory',
      path: '/var/lib/playbook',
    });
    expect(loadConfig({ PLAYBOOK_CONTENT_STORE: 'FILE:///var/lib/playbook' }).contentStore).toEqual({
      kind: 'directory',
      path: '/var/lib/playbook',
    });
    // A colon in a directory's name is no URL.
    expect(loadConfig({ PLAYBOOK_CONTENT_STORE: '/srv/backup:2026' }).contentStore).toEqual({
      kind: 'directory',
      path: '/srv/backup:2026',
    });
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '80.5'],
    ['PLAYBOOK_DATABASE_URL', 'mysql://db/playbook'],
    ['PLAYBOOK_DATABASE_URL', 'sqlite:'],
    ['PLAYBOOK_DATABASE_READ_URL', 'sqlite:./replica'],
    ['PLAYBOOK_DATABASE_PREPARED_STATEMENTS', 'no'],
    ['PLAYBOOK_CONTENT_STORE', 's3://'],
    ['PLAYBOOK_CONTENT_STORE', 's3://Upper_Case'],
    ['PLAYBOOK_CONTENT_STORE', 'ftp://host/dir'],
    ['PLAYBOOK_S3_ENDPOINT', 'minio:9000'],
    ['PLAYBOOK_ENVIRONMENT', 'production'],
    ['PLAYBOOK_REDIS_URL', 'cache:6379'],
    ['PLAYBOOK_JWKS_URL', 'not a url'],
    ['PLAYBOOK_JWT_CLOCK_TOLERANCE_S', '-1'],
    ['PLAYBOOK_RATE_LIMIT_MAX', '0'],
    ['PLAYBOOK_RATE_LIMIT_WINDOW_MS', '10'],
    ['PLAYBOOK_AUTH_FAILURE_MAX', 'many'],
    ['PLAYBOOK_TRUST_PROXY', 'maybe'],
    // D31: proxy ranges the server would refuse as it starts.
    ['PLAYBOOK_TRUST_PROXY', '10.0.0.0/33'],
    ['PLAYBOOK_TRUST_PROXY', '10.0.0.0/8,fd00::/129'],
    ['PLAYBOOK_TRUST_PROXY', '300.1.1.1'],
    ['PLAYBOOK_TRUST_PROXY', '1.2.3'],
    ['PLAYBOOK_TRUST_PROXY', '10.0.0.0/8/1'],
    ['PLAYBOOK_TRUST_PROXY', '10.0.0.0/x'],
    ['PLAYBOOK_TRUST_PROXY', '10.0.0.1,'],
    ['PLAYBOOK_TRUST_PROXY', '100'],
    // D31: a URL of a scheme the service does not know is no directory.
    ['PLAYBOOK_CONTENT_STORE', 's3:/nobucket'],
    ['PLAYBOOK_TRUST_PROXY', '10.0.0.0/255.0.255.0'],
    ['PLAYBOOK_CONTENT_STORE', 'https://bucket.example.com/x'],
    ['PLAYBOOK_SHUTDOWN_DELAY_MS', '-1'],
    ['PLAYBOOK_SHUTDOWN_DELAY_MS', '600001'],
    ['PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY', '0'],
    ['PLAYBOOK_WEBHOOK_ENDPOINT_CONCURRENCY', '101'],
    // D27: a credential holds at least one request, or none could ever wait.
    ['PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY', '0'],
    ['PLAYBOOK_SYNC_MAX_WAITERS_PER_KEY', 'twenty'],
    ['PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT', '0'],
    ['PLAYBOOK_WEBHOOK_MAX_PENDING_PER_ENDPOINT', 'many'],
    ['LOG_LEVEL', 'verbose'],
  ])('stops on %s=%s with a message that names the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name}=`));
  });

  it('names the proxy entry that is wrong, and why', () => {
    expect(() => loadConfig({ PLAYBOOK_TRUST_PROXY: '127.0.0.1,10.0.0.0/33' })).toThrow(
      /^PLAYBOOK_TRUST_PROXY="127.0.0.1,10.0.0.0\/33" is not valid: "10.0.0.0\/33" has a prefix length that is not 0-32/,
    );
    expect(() => loadConfig({ PLAYBOOK_TRUST_PROXY: 'proxy.internal' })).toThrow(
      /"proxy.internal" is not an IP address/,
    );
  });

  it.each([
    ['PLAYBOOK_DATABASE_URL', 'postgress://app:S3cretPw@db:5432/playbook'],
    ['PLAYBOOK_REDIS_URL', 'redi://:S3cretPw@cache:6379'],
    ['PLAYBOOK_CONTENT_STORE', 'ftp://app:S3cretPw@files/dir'],
    ['PLAYBOOK_CONTENT_STORE', 's3://key:S3cretPw@Bad_Bucket/x'],
  ])('never repeats the password of a bad %s in its message (D18)', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    try {
      loadConfig({ [name]: value });
    } catch (error) {
      expect(String((error as Error).message)).not.toContain('S3cretPw');
      expect(String((error as Error).message)).toContain('***@');
    }
  });

  describe('a live deployment never signs its own access tokens (D9)', () => {
    const live = {
      PLAYBOOK_ENVIRONMENT: 'live',
      PLAYBOOK_JWKS_URL: 'https://id.example/.well-known/jwks.json',
      PLAYBOOK_JWT_ISSUER: 'https://id.example/',
      PLAYBOOK_JWT_AUDIENCE: 'playbook',
    };
    const without = (...names: (keyof typeof live)[]) =>
      Object.fromEntries(Object.entries(live).filter(([name]) => !names.includes(name as keyof typeof live)));

    it('loads with an https key set, an issuer and an audience', () => {
      const config = loadConfig(live);
      expect(config.environment).toBe('live');
      expect(config.jwt).toMatchObject({
        jwksUrl: live.PLAYBOOK_JWKS_URL,
        issuer: live.PLAYBOOK_JWT_ISSUER,
        audience: live.PLAYBOOK_JWT_AUDIENCE,
      });
      expect(DevTokenSigner.forDeployment(config)).toBeUndefined();
    });

    it.each([
      [['PLAYBOOK_JWKS_URL'], /^PLAYBOOK_JWKS_URL is required with PLAYBOOK_ENVIRONMENT=live: /],
      [['PLAYBOOK_JWT_ISSUER'], /^PLAYBOOK_JWT_ISSUER is required with PLAYBOOK_ENVIRONMENT=live: /],
      [['PLAYBOOK_JWT_AUDIENCE'], /^PLAYBOOK_JWT_AUDIENCE is required with PLAYBOOK_ENVIRONMENT=live: /],
      [
        ['PLAYBOOK_JWKS_URL', 'PLAYBOOK_JWT_ISSUER', 'PLAYBOOK_JWT_AUDIENCE'],
        /^PLAYBOOK_JWKS_URL, PLAYBOOK_JWT_ISSUER, PLAYBOOK_JWT_AUDIENCE are required with PLAYBOOK_ENVIRONMENT=live: /,
      ],
    ] as const)('stops without %j, naming each one missing', (missing, message) => {
      expect(() => loadConfig(without(...missing))).toThrow(ConfigError);
      expect(() => loadConfig(without(...missing))).toThrow(message);
    });

    it('stops on a key set fetched over plain http, naming the variable and never its password', () => {
      for (const url of ['http://id.example/.well-known/jwks.json', 'http://127.0.0.1:9/jwks.json']) {
        expect(() => loadConfig({ ...live, PLAYBOOK_JWKS_URL: url })).toThrow(
          /^PLAYBOOK_JWKS_URL="http:\/\/.+" is not valid with PLAYBOOK_ENVIRONMENT=live: expected an https:\/\/ URL/,
        );
      }
      expect(() => loadConfig({ ...live, PLAYBOOK_JWKS_URL: 'http://id:S3cretPw@id.example/jwks' })).toThrow(
        /"http:\/\/\*\*\*@id.example\/jwks"/,
      );
    });

    it('a test deployment keeps its embedded signer, and may fetch its key set over http', () => {
      const test = loadConfig({ PLAYBOOK_DATA_DIR: '/srv/playbook' });
      expect(DevTokenSigner.forDeployment(test)?.file).toBe(
        path.resolve('/srv/playbook/dev-token-signing-key.json'),
      );
      const remote = loadConfig({ PLAYBOOK_JWKS_URL: 'http://127.0.0.1:9/jwks.json' });
      expect(remote.jwt.jwksUrl).toBe('http://127.0.0.1:9/jwks.json');
      expect(DevTokenSigner.forDeployment(remote)).toBeUndefined();
    });

    it('no signer is made for a live configuration built by other means than loadConfig', () => {
      const made = { ...loadConfig({}), environment: 'live' as const };
      expect(() => DevTokenSigner.forDeployment(made)).toThrow(
        /^PLAYBOOK_JWKS_URL, PLAYBOOK_JWT_ISSUER, PLAYBOOK_JWT_AUDIENCE are required/,
      );
      const withKeys = {
        ...made,
        jwt: { ...made.jwt, jwksUrl: 'https://id.example/jwks', issuer: 'i', audience: 'a' },
      };
      expect(DevTokenSigner.forDeployment(withKeys)).toBeUndefined();
    });

    it('reads the environment alone, for a command that refuses to run in live', () => {
      expect(deploymentEnvironment({})).toBe('test');
      expect(deploymentEnvironment({ PLAYBOOK_ENVIRONMENT: 'live' })).toBe('live');
      expect(() => deploymentEnvironment({ PLAYBOOK_ENVIRONMENT: 'prod' })).toThrow(/^PLAYBOOK_ENVIRONMENT=/);
    });
  });

  describe("the console's sign-in (D33)", () => {
    const provider = {
      PLAYBOOK_OIDC_ISSUER: 'https://id.example/',
      PLAYBOOK_OIDC_CLIENT_ID: 'playbook-console',
    };

    it('names the identity provider by its issuer and the console client id', () => {
      expect(loadConfig(provider).console).toEqual({
        oidc: { issuer: 'https://id.example/', clientId: 'playbook-console' },
        devSignInOpen: false,
      });
    });

    it('takes plain http for an issuer on a loopback host only', () => {
      for (const issuer of ['http://127.0.0.1:9000/', 'http://localhost:4000', 'http://[::1]:4000']) {
        expect(loadConfig({ ...provider, PLAYBOOK_OIDC_ISSUER: issuer }).console.oidc?.issuer).toBe(issuer);
      }
      for (const issuer of ['http://id.example/', 'http://10.0.0.1/', 'http://127.0.0.1.example/']) {
        expect(() => loadConfig({ ...provider, PLAYBOOK_OIDC_ISSUER: issuer })).toThrow(
          /^PLAYBOOK_OIDC_ISSUER=".+" is not valid: expected an https:\/\/ URL/,
        );
      }
      expect(() => loadConfig({ ...provider, PLAYBOOK_OIDC_ISSUER: 'id.example' })).toThrow(
        /^PLAYBOOK_OIDC_ISSUER="id.example" is not valid/,
      );
    });

    it('stops on one of the two without the other, naming the one missing', () => {
      expect(() => loadConfig({ PLAYBOOK_OIDC_ISSUER: provider.PLAYBOOK_OIDC_ISSUER })).toThrow(
        /^PLAYBOOK_OIDC_CLIENT_ID is required with PLAYBOOK_OIDC_ISSUER/,
      );
      expect(() => loadConfig({ PLAYBOOK_OIDC_CLIENT_ID: 'playbook-console' })).toThrow(
        /^PLAYBOOK_OIDC_ISSUER is required with PLAYBOOK_OIDC_CLIENT_ID/,
      );
    });

    it('opens the development sign-in to every client with PLAYBOOK_DEV_SIGN_IN=true, in a test deployment only', () => {
      expect(loadConfig({ PLAYBOOK_DEV_SIGN_IN: 'true' }).console.devSignInOpen).toBe(true);
      expect(() => loadConfig({ PLAYBOOK_DEV_SIGN_IN: 'yes' })).toThrow(
        /^PLAYBOOK_DEV_SIGN_IN="yes" is not valid/,
      );
      const live = {
        PLAYBOOK_ENVIRONMENT: 'live',
        PLAYBOOK_JWKS_URL: 'https://id.example/.well-known/jwks.json',
        PLAYBOOK_JWT_ISSUER: 'https://id.example/',
        PLAYBOOK_JWT_AUDIENCE: 'playbook',
      };
      expect(loadConfig(live).console.devSignInOpen).toBe(false);
      for (const env of [live, { PLAYBOOK_JWKS_URL: live.PLAYBOOK_JWKS_URL }]) {
        expect(() => loadConfig({ ...env, PLAYBOOK_DEV_SIGN_IN: 'true' })).toThrow(
          /^PLAYBOOK_DEV_SIGN_IN=true is not valid here: the development sign-in exists only in a test deployment/,
        );
      }
    });
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '', LOG_LEVEL: '  ' }).port).toBe(8080);
  });

  it('is frozen, all the way down', () => {
    const config = loadConfig({});
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.database)).toBe(true);
    expect(Object.isFrozen(config.rateLimit)).toBe(true);
    expect(() => {
      (config as { port: number }).port = 1;
    }).toThrow(TypeError);
  });
});
