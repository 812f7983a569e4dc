/**
 * Schemas compiled when first used rather than when the routes are registered.
 *
 * Each route has a check for each part of a request and a serializer for each status it may answer
 * (most of them problem documents, rarely sent). Compiled at start, they took over a second of it and
 * about ten megabytes of an idle instance's memory (generated code, Ajv's schema environments): an
 * instance now compiles what it is asked for, once, on the request that first needs it.
 * `compileAll` compiles the rest, for a test to prove every schema compiles.
 */

/** A check as Fastify calls it: true or false, its errors on the function. */
type Check = ((data: unknown, context?: unknown) => unknown) & { errors?: unknown };

/** A serializer as Fastify calls it. */
type Serializer = (data: unknown) => string;

export class LazyCompilers {
  /** Compilations not yet made, each of which makes itself when run. */
  private readonly pending = new Set<() => void>();

  /** A check made by `make` the first time it is called; its errors are read as Fastify reads them. */
  check<F extends (...args: never[]) => unknown>(make: () => F): F {
    let compiled: Check | undefined;
    const compile = () => {
      compiled ??= make() as unknown as Check;
      this.pending.delete(compile);
      return compiled;
    };
    this.pending.add(compile);
    const lazy: Check = (data, context) => {
      const real = compiled ?? compile();
      const valid = context === undefined ? real(data) : real(data, context);
      lazy.errors = real.errors;
      return valid;
    };
    return lazy as unknown as F;
  }

  /** A serializer made by `make` the first time it is called. */
  serializer(make: () => Serializer): Serializer {
    let compiled: Serializer | undefined;
    const compile = () => {
      compiled ??= make();
      this.pending.delete(compile);
      return compiled;
    };
    this.pending.add(compile);
    return (data) => (compiled ?? compile())(data);
  }

  /** Compiles every schema not yet compiled; throws what a compilation throws. */
  compileAll(): void {
    for (const compile of [...this.pending]) compile();
  }

  /** How many are not compiled yet. */
  get uncompiled(): number {
    return this.pending.size;
  }
}
