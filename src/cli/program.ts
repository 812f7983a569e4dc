import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Command, CommanderError } from 'commander';
import pino from 'pino';
import { createStorage, type Storage } from '../composition/storage.js';
import { migrateToLatest } from '../db/migrate.js';
import { type Config, ConfigError, loadConfig } from '../foundation/config.js';
import { loadDeploymentKeys } from '../foundation/deployment-key.js';
import { PROJECT_ROOT } from '../foundation/project-root.js';
import { REDACTED_PATHS } from '../http/access-log.js';
import { Metrics } from '../observability/metrics.js';
import { registerAccountsCommand } from './accounts.js';
import { registerAuditCommand } from './audit.js';
import { type CliContext, CommandError } from './context.js';
import { registerDetailsCommand } from './details.js';
import { registerGetCommand } from './get.js';
import { registerImportCommand } from './import.js';
import { registerKeysCommand } from './keys.js';
import { registerMigrateCommand } from './migrate.js';
import { registerPublishCommand } from './publish.js';
import { registerPullCommand } from './pull.js';
import { registerServeCommand } from './serve.js';
import { registerTokenCommand } from './token.js';
import { registerWebhooksCommand } from './webhooks.js';

/** Exit codes of D14. */
const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

export interface CliStreams {
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
}

/** Bytes of log lines collected before they are written, and the longest a line waits meanwhile. */
const LOG_BATCH_BYTES = 4096;
const LOG_FLUSH_MS = 200;

let stdoutDestination: pino.DestinationStream | undefined;

/**
 * Standard output for log lines, written synchronously but in batches: one system call per 4 KiB of
 * lines (or per 200 ms) rather than one per line, which under load cost a sixth of a cached read
 * through a pipe. Synchronous writes keep the work on this thread, and what is still held when the
 * process exits (the last lines of a shutdown) is written on the way out.
 */
function batchedStdout(): pino.DestinationStream {
  // One per process: every logger writing to file descriptor 1 shares its buffer, so lines keep order.
  if (stdoutDestination) return stdoutDestination;
  const destination = pino.destination({ dest: 1, sync: true, minLength: LOG_BATCH_BYTES });
  const flush = (write: () => void) => () => {
    try {
      write();
    } catch {
      // Standard output is gone (a closed pipe): nothing left to write to.
    }
  };
  // While running, the lines held are written as they are (`flush`); `flushSync` would also fsync,
  // which stalls every request for a disk flush when standard output is a file. On the way out, they
  // are written and synced.
  setInterval(
    flush(() => destination.flush()),
    LOG_FLUSH_MS,
  ).unref();
  process.once(
    'exit',
    flush(() => destination.flushSync()),
  );
  stdoutDestination = destination;
  return destination;
}

/** `opened`, its schema brought up to date unless told not to; closed again if that fails. */
async function migrated<T extends Pick<Storage, 'databases' | 'close'>>(
  opened: T,
  options: { migrate?: boolean },
): Promise<T> {
  if (options.migrate === false) return opened;
  try {
    await migrateToLatest(opened.databases);
  } catch (error) {
    await opened.close();
    throw error;
  }
  return opened;
}

/**
 * Where a command's log lines go. `serve` writes its JSON lines to standard output, where a process
 * manager collects them; every other command prints what it was asked for there (a key, a table, a
 * report), so its log lines go to standard error and never mix with it.
 */
function logDestination(command: string | undefined): pino.DestinationStream {
  return command === 'serve' ? batchedStdout() : pino.destination({ dest: 2, sync: true });
}

export function createContext(
  env: NodeJS.ProcessEnv,
  streams: CliStreams = process,
  command?: string,
): CliContext {
  let config: Config | undefined;
  let logger: pino.Logger | undefined;
  const context: CliContext = {
    env,
    stdout: streams.stdout,
    stderr: streams.stderr,
    config: () => {
      config ??= loadConfig(env);
      return config;
    },
    logger: () => {
      logger ??= pino(
        {
          level: context.config().logLevel,
          redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
        },
        logDestination(command),
      );
      return logger;
    },
    // Loaded when a command asks for it: a command that needs storage alone never loads the service.
    openServices: async (options = {}) => {
      const { createServices } = await import('../composition/services.js');
      const observation = {
        metrics: new Metrics(),
        ...(options.tracing ? { tracing: options.tracing } : {}),
      };
      const config = context.config();
      // Loaded once, here, and handed down: they seal what the service gives out (D27).
      const deploymentKeys = options.sync
        ? await loadDeploymentKeys({
            dataDir: config.dataDir,
            databaseKind: config.database.kind,
            ...(config.deploymentKeys ? { keys: config.deploymentKeys } : {}),
          })
        : undefined;
      return migrated(
        createServices(config, context.logger(), {
          observation,
          ...(deploymentKeys ? { deploymentKeys } : {}),
        }),
        options,
      );
    },
    openStorage: async (options = {}) => migrated(createStorage(context.config(), context.logger()), options),
  };
  return context;
}

/** The version of this package, read once from its package.json. */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }
).version;

export function buildProgram(context: CliContext): Command {
  const program = new Command('playbook')
    .description('Playbook: Catalogs of Resources with versioned content, behind scoped API keys')
    .version(PACKAGE_VERSION, '-V, --version', 'print the version of playbook')
    .showHelpAfterError()
    .exitOverride()
    // Before any subcommand exists: commander copies these settings into each one as it is created.
    .configureOutput({
      writeOut: (text) => context.stdout.write(text),
      writeErr: (text) => context.stderr.write(text),
    });
  for (const register of [
    registerServeCommand,
    registerMigrateCommand,
    registerDetailsCommand,
    registerImportCommand,
    registerAccountsCommand,
    registerTokenCommand,
    registerKeysCommand,
    registerPublishCommand,
    registerPullCommand,
    registerAuditCommand,
    registerGetCommand,
    registerWebhooksCommand,
  ]) {
    register(program, context);
  }
  return program;
}

/**
 * Runs the CLI and returns its exit code (D14).
 *
 * @example
 * await main(['node', 'playbook', 'accounts', 'set', 'acme', '--plan', 'pro'], process.env); // 0
 */
export async function main(
  argv: string[],
  env: NodeJS.ProcessEnv,
  streams: CliStreams = process,
): Promise<number> {
  // The command's name, the first word after the program's, decides where its log lines go.
  const context = createContext(env, streams, argv[2]);
  const program = buildProgram(context);
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version end with exit code 0; any other commander error is bad usage.
      return error.exitCode === 0 ? 0 : EXIT_USAGE;
    }
    const message =
      error instanceof ConfigError || error instanceof CommandError
        ? error.message
        : error instanceof Error
          ? `${error.name === 'Error' ? 'error' : error.name}: ${error.message}`
          : String(error);
    context.stderr.write(`playbook: ${message}\n`);
    return EXIT_FAILURE;
  }
}
