import { type Command, InvalidArgumentError } from 'commander';
import { importDemoContentIfEmpty } from '../composition/demo.js';
import { pendingMigrations } from '../db/migrate.js';
import { startMetricsServer } from '../observability/metrics.js';
import { startTracing } from '../observability/tracing.js';
import { InstanceState } from '../routes/operations.js';
import { type CliContext, CommandError } from './context.js';

/** How long a stop waits for the requests in flight once the shutdown delay is over. */
export const DRAIN_TIMEOUT_MS = 10_000;

/**
 * `playbook serve [--port N] [--host H] [--no-migrate]` (D14): migrates, then serves; SIGTERM drains
 * in-flight requests. With `--no-migrate`, as replicas run beside a `playbook migrate` of their own, it
 * leaves the schema alone and refuses to start against one this version is ahead of.
 */
export function registerServeCommand(program: Command, context: CliContext): void {
  program
    .command('serve')
    .description('migrate the database, then serve the API')
    .addHelpText(
      'after',
      `
SIGINT (Ctrl-C) or SIGTERM stops it: /readyz fails, it serves on for PLAYBOOK_SHUTDOWN_DELAY_MS, then
answers the requests in flight, frees the port and exits 0. Further signals do not cut that short.`,
    )
    .option('--port <port>', 'port to listen on (default: PORT or 8080)', parsePort)
    .option('--host <host>', 'address to listen on (default: HOST or 127.0.0.1)')
    .option(
      '--no-migrate',
      'leave the schema alone; refuse to start unless `playbook migrate` brought it up to date',
    )
    .action(async (options: { port?: number; host?: string; migrate: boolean }) => {
      const config = context.config();
      const logger = context.logger();
      // Started before anything else opens, so that the first requests are traced too.
      const traced = await startTracing(context.env);
      const services = await context.openServices({
        sync: true,
        migrate: options.migrate,
        ...(traced ? { tracing: traced } : {}),
      });
      if (!options.migrate) {
        // A failure to read which migrations ran ends the process as any failure to start does.
        const pending = await pendingMigrations(services.databases);
        if (pending.length > 0) {
          await services.close();
          await traced?.close();
          throw new CommandError(
            `the database schema is behind this version of playbook (${pending.join(', ')} not run): run \`playbook migrate\`, then start again`,
          );
        }
      }
      // The HTTP side is loaded by this command only: the others never need it.
      const { buildApp } = await import('../composition/app.js');
      // D29: the docs pages are rendered once, before the first request.
      const { renderDocs } = await import('../docs/docs-site.js');
      const docs = await renderDocs();
      // D33: the console as `npm run build` made it, read once; a checkout without it serves the API.
      const { loadConsole } = await import('../console/console-site.js');
      const consoleSite = await loadConsole({
        ...(config.console.oidc ? { oidc: config.console.oidc } : {}),
        devSignIn: services.identity.devSignIn !== undefined,
      });
      if (!consoleSite)
        logger.warn('the console is not built (npm run build makes it): /console is not served');
      // D31: `/readyz` fails until the instance listens with the change log followed, and from the stop
      // signal on, while the instance goes on serving for the shutdown delay.
      const instance = new InstanceState('starting');
      const app = await buildApp({
        reads: services.reads,
        authenticator: services.authenticator,
        rateLimits: services.rateLimits,
        usage: services.identity.usage,
        readiness: services.readiness,
        instance,
        servesFromMemory: () => services.servesFromMemory(),
        keys: services.identity.keys,
        audit: services.audit,
        accounts: services.accounts,
        ...(services.identity.devSignIn ? { devSignIn: services.identity.devSignIn } : {}),
        ...(consoleSite ? { console: consoleSite } : {}),
        ...(services.sync ? { sync: services.sync } : {}),
        webhooks: services.webhooks,
        publish: {
          service: services.publish,
          maxBodyBytes: config.maxPublishBytes,
          maxResources: config.maxPublishResources,
        },
        ...(services.identity.leakSignatures ? { leakSignatures: services.identity.leakSignatures } : {}),
        trustProxy: config.trustProxy,
        timeouts: config.timeouts,
        metrics: services.metrics,
        ...(traced ? { tracing: traced } : {}),
        docs,
        logger,
      });
      if (traced) {
        app.addHook('onClose', () => traced.close());
        logger.info('tracing through OpenTelemetry');
      }
      // D31: a content store that cannot be used is said at start, in one line, rather than found by the
      // first read of content.
      await services.objectStore.check().catch((error: unknown) => {
        const where =
          config.contentStore.kind === 's3'
            ? `s3://${config.contentStore.bucket}/${config.contentStore.prefix}`
            : config.contentStore.path;
        logger.error(
          { contentStore: where, reason: error instanceof Error ? error.message : String(error) },
          'the content store cannot be used: content kept in object storage answers errors until it can (PLAYBOOK_CONTENT_STORE)',
        );
      });
      // Demo content is for the embedded default only: a production database starts empty.
      if (config.database.kind === 'sqlite' && config.contentStore.kind === 'directory') {
        await importDemoContentIfEmpty(services, logger);
      }
      // From here on, a write made by any process (another instance, `playbook import`) shows here, through the change log.
      await services.follower.start();
      // A deployment key that cannot be had (PostgreSQL without one configured) stops the start here.
      await services.deploymentKeys();

      let stopping = false;
      const shutdown = (signal: string) => {
        // One stop, however many signals arrive: a Ctrl-C on `npm start` is a SIGINT to npm and to this
        // process (the foreground group), and npm forwards its own here too. A second does not cut it short.
        if (stopping) return;
        stopping = true;
        instance.state = 'draining';
        void (async () => {
          const delayMs = config.shutdownDelayMs;
          if (delayMs > 0) {
            // Load balancers see /readyz fail and stop sending traffic; what they still send is served.
            logger.info({ signal, delayMs }, 'stopping: /readyz fails; serving on for the shutdown delay');
            await new Promise((resolve) => setTimeout(resolve, delayMs));
          }
          logger.info({ signal }, 'draining in-flight requests');
          const timer = setTimeout(() => {
            logger.error('drain timed out; exiting');
            process.exit(1);
          }, DRAIN_TIMEOUT_MS);
          timer.unref();
          try {
            await app.close();
            await services.close();
            logger.info('stopped');
            // Everything is closed: the process ends by itself. Should a handle outlive it (a bug),
            // it still ends, rather than hold a port and a process manager's stop.
            setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref();
          } catch (error) {
            logger.error({ err: error }, 'shutdown failed');
            process.exitCode = 1;
          } finally {
            clearTimeout(timer);
          }
        })();
      };
      process.on('SIGTERM', () => shutdown('SIGTERM'));
      process.on('SIGINT', () => shutdown('SIGINT'));

      // Its own listener, never the API's port: metrics are for the operators' network (D25). Opened
      // first, so that the first requests are counted, and so that a port already taken stops the
      // start rather than leaving a service nobody can watch.
      const metrics = config.metrics ? await startMetricsServer(services.metrics, config.metrics) : undefined;
      if (metrics) app.addHook('onClose', () => metrics.close());
      const address = await app.listen({
        port: options.port ?? config.port,
        host: options.host ?? config.host,
      });
      if (!stopping) instance.state = 'serving';
      // D28: webhook deliveries are made by every instance, off the request path, once it has started
      // (attempts made while it still starts would be timed by a busy event loop).
      if (!stopping) services.webhookDispatcher.start();
      // D30: the rows of the read model of details the database lacks are written once serving, off
      // the request path, then kept as the change log is followed.
      if (!stopping) services.storedDetails.start(services.follower);
      // D32: every instance looks for due expiry notices; each is made once, by whichever is first.
      if (!stopping) services.identity.expiryNotices.start();
      // D33: the console's address beside the API's, in the same write, so that the banner is whole.
      const [serving = '', ...firstSteps] = services.gettingStarted(address);
      const banner = [serving, ...(consoleSite ? [`Console: ${address}/console`] : []), ...firstSteps];
      context.stderr.write(banner.map((line) => `${line}\n`).join(''));
      if (metrics) context.stderr.write(`Metrics for Prometheus: ${metrics.address}/metrics\n`);
    });
}

function parsePort(value: string): number {
  const port = Number(value);
  // Commander reports an InvalidArgumentError as bad usage: exit 2 (D14).
  if (!/^\d{1,5}$/.test(value) || port > 65535)
    throw new InvalidArgumentError('expected a port number, 0-65535');
  return port;
}
