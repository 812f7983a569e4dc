import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import http2 from 'node:http2';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { publishedResource } from '../helpers/publish-bodies.js';
import {
  freePort,
  type PostgresServer,
  type RedisServer,
  startPostgresWithDatabase,
  startRedis,
} from '../helpers/servers.js';
import { selfSignedCertificate } from '../helpers/tls.js';
import { sleep, waitFor } from '../helpers/wait.js';

/**
 * D31: the operations guide's nginx configuration (docs/operations.md), as it is written there, in
 * front of two instances (`playbook serve`, each a process of its own) on PostgreSQL, S3 and Redis,
 * with TLS (a certificate the test makes) and HTTP/2. A client reading through nginx sees no error
 * while PostgreSQL restarts, nor while an instance stops with a shutdown delay.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'dist/cli/main.js');
const run = promisify(execFile);
const CATALOG = '/v3/playbook/catalogs/org/handbook';

/** The guide's configuration, its placeholders replaced; each must be found, or the guide changed. */
async function guideConfiguration(replacements: readonly [string, string][]): Promise<string> {
  const guide = await fs.readFile(path.join(ROOT, 'docs/operations.md'), 'utf8');
  const block = /```nginx\n([\s\S]*?)```/.exec(guide)?.[1];
  if (!block) throw new Error('docs/operations.md holds no nginx configuration');
  let text = block;
  for (const [from, to] of replacements) {
    if (!text.includes(from)) throw new Error(`the guide's nginx configuration no longer holds ${from}`);
    text = text.replaceAll(from, to);
  }
  return text;
}

interface Answer {
  readonly status: number;
  readonly headers: http2.IncomingHttpHeaders;
  readonly body: string;
}

/**
 * A client over HTTP/2 to nginx, trusting the test's certificate: one connection at a time, and a
 * new one once nginx ends it (it does after `http2_max_requests`, as a browser or an SDK would see).
 */
function h2Client(origin: string, ca: Buffer) {
  let session: http2.ClientHttp2Session | undefined;
  const connection = () => {
    if (!session || session.closed || session.destroyed) {
      const opened = http2.connect(origin, { ca, servername: 'localhost' });
      opened.on('error', () => {});
      // After a GOAWAY, streams already sent finish; new ones go on a new connection.
      opened.on('goaway', () => {
        if (session === opened) session = undefined;
      });
      session = opened;
    }
    return session;
  };
  type Options = { method?: string; headers?: Record<string, string>; body?: unknown };
  /**
   * A stream the server refused (REFUSED_STREAM, sent for the streams past a GOAWAY) was not
   * processed: HTTP/2 clients send it again on a new connection (RFC 9113 §8.7), and so does this one.
   */
  const request = async (pathname: string, options: Options = {}): Promise<Answer> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await once(pathname, options);
      } catch (error) {
        const refused = String(error).includes('NGHTTP2_REFUSED_STREAM');
        if (!refused || attempt === 3) throw error;
        session = undefined;
      }
    }
  };
  const once = (pathname: string, options: Options) =>
    new Promise<Answer>((resolve, reject) => {
      const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
      const stream = connection().request({
        ':method': options.method ?? 'GET',
        ':path': pathname,
        ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
        ...options.headers,
      });
      let status = 0;
      let headers: http2.IncomingHttpHeaders = {};
      let body = '';
      stream.setEncoding('utf8');
      stream.on('response', (received) => {
        status = Number(received[':status']);
        headers = received;
      });
      stream.on('data', (chunk: string) => {
        body += chunk;
      });
      stream.on('end', () => resolve({ status, headers, body }));
      stream.on('error', reject);
      // No answer is worth waiting for longer than this: it is an error the client sees.
      stream.setTimeout(10_000, () => stream.close(http2.constants.NGHTTP2_CANCEL));
      stream.on('close', () => resolve({ status, headers, body }));
      stream.end(payload);
    });
  return {
    get protocol() {
      return connection().alpnProtocol;
    },
    request,
    close: () => session?.close(),
  };
}

interface Served {
  readonly child: ChildProcess;
  readonly stdout: () => string;
  readonly exited: Promise<number | null>;
}

function serve(env: NodeJS.ProcessEnv): Promise<Served> {
  const child = spawn(process.execPath, [CLI, 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes('is serving on')) resolve({ child, stdout: () => stdout, exited });
    });
    void exited.then(() => reject(new Error(`serve exited early:\n${stderr}`)));
  });
}

describe('behind nginx, with TLS and HTTP/2 (D31, docs/operations.md)', () => {
  let backend: TestBackend;
  let server: PostgresServer;
  let redis: RedisServer;
  let nginx: ChildProcess;
  let nginxLog = '';
  /**
   * nginx's error log a line at a time, each with when the test read it: never before nginx wrote it,
   * so a line read before an instant was written before it (nginx's own stamps are in seconds).
   */
  const nginxLines: { readonly at: number; readonly line: string }[] = [];
  /** The instances' ports, as nginx names them in its lines about an upstream. */
  let ports: number[];
  const instances: Served[] = [];
  let ca: Buffer;
  let origin: string;
  let env: NodeJS.ProcessEnv;
  let reader: Record<string, string>;
  let writer: Record<string, string>;

  beforeAll(async () => {
    backend = await createTestBackend();
    ({ server } = await startPostgresWithDatabase());
    redis = await startRedis();

    const dir = path.join(backend.workDir, 'nginx');
    await fs.mkdir(path.join(dir, 'temp'), { recursive: true });
    // nginx's workers run as an unprivileged user when it is started as root: they write here.
    await fs.chmod(path.join(dir, 'temp'), 0o777);
    const certificate = await selfSignedCertificate(dir);
    ca = certificate.cert;

    ports = [await freePort(), await freePort()];
    const proxyPort = await freePort();
    env = {
      ...process.env,
      ...backend.env,
      PLAYBOOK_DATABASE_URL: server.urlFor('playbook'),
      PLAYBOOK_REDIS_URL: redis.url,
      PLAYBOOK_TRUST_PROXY: '127.0.0.1',
      PLAYBOOK_SHUTDOWN_DELAY_MS: '1500',
      PLAYBOOK_RATE_LIMIT_MAX: '1000000',
      LOG_LEVEL: 'info',
    };
    await run(process.execPath, [CLI, 'migrate'], { env });
    for (const port of ports) instances.push(await serve({ ...env, PORT: String(port) }));

    const configuration = await guideConfiguration([
      ['127.0.0.1:8081', `127.0.0.1:${ports[0]}`],
      ['127.0.0.1:8082', `127.0.0.1:${ports[1]}`],
      ['listen 443 ssl http2', `listen 127.0.0.1:${proxyPort} ssl http2`],
      ['/etc/playbook/tls/cert.pem', certificate.certFile],
      ['/etc/playbook/tls/key.pem', certificate.keyFile],
      // Where a test's nginx keeps its files, rather than the system's.
      [
        'http {',
        `pid ${path.join(dir, 'nginx.pid')};\nhttp {\n    access_log off;\n${[
          'client_body',
          'proxy',
          'fastcgi',
          'uwsgi',
          'scgi',
        ]
          .map((kind) => `    ${kind}_temp_path ${path.join(dir, 'temp', kind)};`)
          .join('\n')}`,
      ],
    ]);
    await fs.writeFile(path.join(dir, 'nginx.conf'), configuration);
    nginx = spawn(
      'nginx',
      ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-e', 'stderr', '-g', 'daemon off;'],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let unfinished = '';
    nginx.stderr!.on('data', (chunk: Buffer) => {
      const at = Date.now();
      nginxLog += chunk.toString();
      const lines = (unfinished + chunk.toString()).split('\n');
      unfinished = lines.pop() ?? '';
      for (const line of lines) nginxLines.push({ at, line });
    });
    origin = `https://127.0.0.1:${proxyPort}`;
    await waitFor(
      'nginx answering',
      async () => {
        const client = h2Client(origin, ca);
        try {
          return (await client.request('/healthz')).status === 200;
        } catch {
          return false;
        } finally {
          client.close();
        }
      },
      15_000,
    );

    // An account's keys and a published Catalog, through nginx.
    const { stdout: token } = await run(
      process.execPath,
      [CLI, 'token', '--user', 'ada', '--account', 'acme'],
      {
        env,
      },
    );
    const client = h2Client(origin, ca);
    try {
      const keyOf = async (scopes: string[]) => {
        const created = await client.request('/v3/identity/api-keys', {
          method: 'POST',
          headers: { authorization: `Bearer ${token.trim()}` },
          body: { name: scopes.join(' '), accountId: 'acme', scopes },
        });
        expect(created.status, created.body).toBe(201);
        return (JSON.parse(created.body) as { key: string }).key;
      };
      reader = { 'x-api-key': await keyOf(['playbook:read']) };
      writer = { 'x-api-key': await keyOf(['playbook:read', 'playbook:write']) };
      const published = await client.request(CATALOG, {
        method: 'PUT',
        headers: writer,
        body: {
          name: 'Handbook',
          version: '1',
          resources: ['intro', 'deploy', 'rollback'].map((slug) => publishedResource(slug)),
        },
      });
      expect(published.status, published.body).toBe(201);
    } finally {
      client.close();
    }
  }, 120_000);

  afterAll(async () => {
    nginx?.kill('SIGTERM');
    for (const instance of instances) instance.child.kill('SIGKILL');
    await redis?.destroy();
    await server?.destroy();
    await backend?.cleanup();
  });

  /** Reads of the account's held answers through nginx, eight at a time, until `stop` is called. */
  function load() {
    const outcomes: { status: number; error?: string }[] = [];
    const clients = [h2Client(origin, ca), h2Client(origin, ca)];
    let running = true;
    const urls = [`${CATALOG}/resources`, '/v3/playbook/catalogs', `${CATALOG}/resources?kind=document`];
    const loops = Array.from({ length: 8 }, async (_, n) => {
      for (let i = 0; running; i++) {
        try {
          const answer = await clients[n % 2]!.request(urls[(n + i) % urls.length]!, { headers: reader });
          outcomes.push({ status: answer.status });
        } catch (error) {
          outcomes.push({ status: 0, error: String(error) });
          // A failure that comes at once must not spin: the next try waits a turn of the loop.
          await sleep(10);
        }
      }
    });
    return {
      outcomes,
      stop: async () => {
        running = false;
        await Promise.all(loops);
        for (const client of clients) client.close();
        return outcomes;
      },
    };
  }

  it("serves over TLS and HTTP/2, and the instances see the client's own address, not nginx's nor a forged one", async () => {
    const client = h2Client(origin, ca);
    try {
      const answer = await client.request('/v3/playbook/catalogs', {
        headers: { ...reader, 'x-forwarded-for': '203.0.113.9' },
      });
      expect(answer.status).toBe(200);
      expect(client.protocol).toBe('h2');
      expect((await client.request('/readyz')).status).toBe(200);
    } finally {
      client.close();
    }
    // The test's client connects from 127.0.0.1, as nginx does: the instance believes nginx, which
    // names the address the client connected from, not the one the client claimed.
    await waitFor('the access line of that request', async () =>
      instances.some((instance) => instance.stdout().includes('"op":"listPlaybookCatalogs"')),
    );
    const lines = instances.flatMap((instance) =>
      instance
        .stdout()
        .split('\n')
        .filter((line) => line.includes('"op":"listPlaybookCatalogs"')),
    );
    expect(lines.some((line) => line.includes('"client":"127.0.0.1"'))).toBe(true);
    expect(lines.some((line) => line.includes('203.0.113.9'))).toBe(false);
  });

  it('a PostgreSQL restart under reads: no error reaches the client', async () => {
    const running = load();
    await sleep(500);
    const started = Date.now();
    await server.stop();
    await server.start();
    const restartMs = Date.now() - started;
    await sleep(1500);
    const outcomes = await running.stop();
    const failed = outcomes.filter((outcome) => outcome.status !== 200);
    console.log(
      `PostgreSQL restart of ${restartMs} ms under ${outcomes.length} reads through nginx: ${failed.length} errors`,
    );
    expect(outcomes.length).toBeGreaterThan(100);
    expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
  }, 60_000);

  it('PostgreSQL stopped for five seconds under reads: every held read answers, a write answers 503 with Retry-After', async () => {
    const running = load();
    await sleep(300);
    await server.stop();
    const client = h2Client(origin, ca);
    let write: Answer;
    try {
      await sleep(1500);
      const { slug: _slug, ...body } = publishedResource('intro', { version: '2', content: '# intro, 2\n' });
      write = await client.request(`${CATALOG}/resources/intro`, { method: 'PUT', headers: writer, body });
      await sleep(3500);
    } finally {
      client.close();
      await server.start();
    }
    await sleep(1500);
    const outcomes = await running.stop();
    const failed = outcomes.filter((outcome) => outcome.status !== 200);
    console.log(
      `PostgreSQL stopped for 5 s under ${outcomes.length} reads through nginx: ${failed.length} errors`,
    );
    expect(outcomes.length).toBeGreaterThan(200);
    expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
    expect(write!.status).toBe(503);
    expect(JSON.parse(write!.body)).toMatchObject({ code: 'unavailable' });
    // When to try again reaches the client through nginx (D31: a 503 with Retry-After).
    expect(Number(write!.headers['retry-after'])).toBeGreaterThan(0);
  }, 60_000);

  it('an instance stopped with a shutdown delay: no error, no refused connection, and it exits 0', async () => {
    const running = load();
    await sleep(500);
    const [stopping] = instances;
    const signalledAt = Date.now();
    stopping!.child.kill('SIGTERM');
    const exit = await Promise.race([stopping!.exited, sleep(15_000).then(() => 'still running')]);
    await sleep(1000);
    const outcomes = await running.stop();
    expect(exit, stopping!.stdout().split('\n').slice(-8).join('\n')).toBe(0);
    const failed = outcomes.filter((outcome) => outcome.status !== 200);
    console.log(`an instance's stop under ${outcomes.length} reads through nginx: ${failed.length} errors`);
    expect(outcomes.length).toBeGreaterThan(100);
    expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
    const logged = stopping!
      .stdout()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { msg: string; time: number });
    const messages = logged.map((line) => line.msg);
    expect(messages).toEqual(
      expect.arrayContaining(['stopping: /readyz fails; serving on for the shutdown delay', 'stopped']),
    );
    // It went on answering through the delay, after /readyz had begun to fail.
    const delay = messages.slice(
      messages.indexOf('stopping: /readyz fails; serving on for the shutdown delay'),
      messages.indexOf('draining in-flight requests'),
    );
    expect(delay.filter((message) => message === 'request').length).toBeGreaterThan(10);
    expect(nginxLog).not.toMatch(/\[(emerg|alert|crit)\]/);

    // D31: through the delay the listener keeps accepting. nginx logs each connection to an upstream
    // that is refused or cut; none may come from the signal until the instance begins to drain, after
    // which it closes its listener (its 'draining' line is written before that).
    const drainingAt = logged.find((line) => line.msg === 'draining in-flight requests')!.time;
    const upstreamFailures = nginxLines.filter(
      ({ at, line }) =>
        at >= signalledAt &&
        /connect\(\) failed \(111|upstream prematurely closed|no live upstreams/.test(line),
    );
    const duringDelay = upstreamFailures.filter(({ at }) => at <= drainingAt);
    const afterDelay = upstreamFailures.filter(({ at }) => at > drainingAt);
    console.log(
      `an instance's stop: shutdown delay ${drainingAt - signalledAt} ms, upstream connections refused or cut during it: ${duringDelay.length}, after it: ${afterDelay.length}, each tried again on the other instance; client-visible errors: ${failed.length}`,
    );
    expect(drainingAt - signalledAt).toBeGreaterThanOrEqual(1500);
    expect(duringDelay.map(({ line }) => line)).toEqual([]);
    // Those after it are all of the stopped instance's address, and none reached a client (above).
    for (const { line } of afterDelay) expect(line).toContain(`127.0.0.1:${ports[0]}`);
  }, 60_000);
});
