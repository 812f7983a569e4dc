import { Writable } from 'node:stream';
import Fastify from 'fastify';
import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { lazyRequestLogger } from '../../src/http/request-logger.js';

/** A pino logger writing JSON lines into `lines`. */
function capturing(level = 'info') {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level }, stream), lines };
}

describe('lazyRequestLogger', () => {
  it('makes the child logger on first use, once, with the bindings and options it was given', () => {
    const { logger, lines } = capturing();
    const child = vi.spyOn(logger, 'child');
    const requestLogger = lazyRequestLogger(logger, { reqId: 'r-1' }, { level: 'debug' });
    expect(requestLogger.level).toBe('debug');
    expect(child).not.toHaveBeenCalled();

    requestLogger.debug({ step: 1 }, 'first');
    requestLogger.info('second %s', 'line');
    expect(child).toHaveBeenCalledTimes(1);
    expect(child).toHaveBeenCalledWith({ reqId: 'r-1' }, { level: 'debug' });
    expect(lines).toMatchObject([
      { reqId: 'r-1', step: 1, msg: 'first', level: 20 },
      { reqId: 'r-1', msg: 'second line', level: 30 },
    ]);
  });

  it("reads the parent's level until it has a child, and sets the child's", () => {
    const { logger, lines } = capturing('warn');
    const requestLogger = lazyRequestLogger(logger, { reqId: 'r-2' }, {});
    expect(requestLogger.level).toBe('warn');
    requestLogger.info('dropped');
    requestLogger.level = 'info';
    requestLogger.info('kept');
    expect(logger.level).toBe('warn');
    expect(lines).toMatchObject([{ reqId: 'r-2', msg: 'kept' }]);
  });

  it("gives a child of its own the request's bindings too", () => {
    const { logger, lines } = capturing();
    lazyRequestLogger(logger, { reqId: 'r-3' }, {}).child({ part: 'db' }).error('failed');
    expect(lines).toMatchObject([{ reqId: 'r-3', part: 'db', msg: 'failed', level: 50 }]);
  });

  it("as Fastify's factory: a request that logs nothing makes no child; one that logs names its id", async () => {
    const { logger, lines } = capturing();
    const app = Fastify({
      loggerInstance: logger,
      childLoggerFactory: lazyRequestLogger,
      disableRequestLogging: true,
    });
    app.get('/quiet', async () => ({ ok: true }));
    app.get('/loud', async (request) => {
      request.log.warn('something to say');
      return { ok: true };
    });
    await app.ready();
    const child = vi.spyOn(logger, 'child');
    for (let i = 0; i < 5; i++) expect((await app.inject({ url: '/quiet' })).statusCode).toBe(200);
    expect(child).not.toHaveBeenCalled();
    const loud = await app.inject({ url: '/loud' });
    expect(loud.statusCode).toBe(200);
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines.find((line) => line.msg === 'something to say')).toMatchObject({
      reqId: expect.any(String),
    });
    await app.close();
  });
});
