import type { FastifyBaseLogger } from 'fastify';
import type { Services } from '../composition/services.js';
import type { Storage } from '../composition/storage.js';
import type { Config } from '../foundation/config.js';
import type { Tracing } from '../observability/tracing.js';

/** What every command gets: the validated configuration, services on demand, and its streams. */
export interface CliContext {
  readonly env: Readonly<Record<string, string | undefined>>;
  config(): Config;
  logger(): FastifyBaseLogger;
  /**
   * Opens the whole service and, unless told not to, brings the schema up to date; the caller closes
   * it. Storage calls are traced when `tracing` is given; `sync` loads the deployment's keys for the
   * sync feed (D27).
   */
  openServices(options?: { migrate?: boolean; tracing?: Tracing; sync?: boolean }): Promise<Services>;
  /** Opens storage alone (no identity, no read path), as `openServices` does. */
  openStorage(options?: { migrate?: boolean }): Promise<Storage>;
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
}

/** A command failure that ends the process with exit 1 and one line on stderr (D14). */
export class CommandError extends Error {
  override name = 'CommandError';
}
