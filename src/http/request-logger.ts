import type { FastifyBaseLogger } from 'fastify';

type Bindings = Parameters<FastifyBaseLogger['child']>[0];
type ChildOptions = NonNullable<Parameters<FastifyBaseLogger['child']>[1]>;
type Level = FastifyBaseLogger['level'];
type Log = (...args: unknown[]) => void;

/**
 * A request's logger, made the first time something logs through it. Fastify gives every request a
 * child logger bound to its id, and pino serialises the bindings as it makes one: a measurable part of
 * a read answered from memory, for a logger that most requests never use. Their one line, the access
 * line, is written through the parent and names the request id itself (see access-log.ts).
 */
class RequestLogger implements FastifyBaseLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildOptions,
  ) {}

  private get logger(): FastifyBaseLogger {
    this.made ??= this.parent.child(this.bindings, this.options);
    return this.made;
  }

  get level(): Level {
    return this.made?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: Level) {
    this.logger.level = level;
  }

  fatal(...args: unknown[]): void {
    (this.logger.fatal as Log)(...args);
  }

  error(...args: unknown[]): void {
    (this.logger.error as Log)(...args);
  }

  warn(...args: unknown[]): void {
    (this.logger.warn as Log)(...args);
  }

  info(...args: unknown[]): void {
    (this.logger.info as Log)(...args);
  }

  debug(...args: unknown[]): void {
    (this.logger.debug as Log)(...args);
  }

  trace(...args: unknown[]): void {
    (this.logger.trace as Log)(...args);
  }

  silent(...args: unknown[]): void {
    (this.logger.silent as Log)(...args);
  }

  child(bindings: Bindings, options?: ChildOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options);
  }
}

/** Fastify's `childLoggerFactory`: each request's logger is made when it is first used. */
export function lazyRequestLogger(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildOptions,
): FastifyBaseLogger {
  return new RequestLogger(logger, bindings, options);
}
