import { type Playbook, PlaybookError } from '@playbook/client';
import type { Command } from 'commander';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';
import { type CliContext, CommandError } from './context.js';
import { printable } from './printable.js';
import { INSECURE_HTTP_OPTION, type RemoteOptions, serviceTarget, userClient } from './service-client.js';

/**
 * `playbook webhooks list|create|test|deliveries` (D28): an account's webhook endpoints, through a
 * running service (`--url` or `PLAYBOOK_URL`) as a user, with the access token of
 * `PLAYBOOK_ACCESS_TOKEN` (never a flag: flags end up in shell histories and CI logs).
 *
 * @example
 * export PLAYBOOK_URL=https://playbook.example.com PLAYBOOK_ACCESS_TOKEN=…
 * playbook webhooks create --account acme --url https://ci.example.com/hooks --events resource.version_published
 * playbook webhooks test 0192…
 * playbook webhooks deliveries 0192…
 */
export function registerWebhooksCommand(program: Command, context: CliContext): void {
  const webhooks = program
    .command('webhooks')
    .description(
      "manage an account's webhook endpoints through a running service (PLAYBOOK_URL, PLAYBOOK_ACCESS_TOKEN)",
    );

  const client = (options: RemoteOptions, command: Command): Playbook => {
    const target = serviceTarget(context, options, command);
    if (target === undefined) command.error('error: give --url or set PLAYBOOK_URL to the running service');
    return userClient(context, target, command, {
      missing: 'error: PLAYBOOK_ACCESS_TOKEN must hold the access token of a user of the account',
    });
  };
  const account = (value: string, command: Command): string => {
    if (!ACCOUNT_ID_PATTERN.test(value))
      command.error(`error: --account ${JSON.stringify(value)} is not an account id`);
    return value;
  };
  const write = (rows: readonly (readonly string[])[]) =>
    context.stdout.write(`${rows.map((row) => row.join('\t')).join('\n')}\n`);
  const urlOption = ['--url <baseUrl>', 'where the running service is (default: PLAYBOOK_URL)'] as const;

  webhooks
    .command('list')
    .description("list an account's webhook endpoints, one per line, tab-separated")
    .requiredOption('--account <accountId>', 'the account')
    .option(...urlOption)
    .option(...INSECURE_HTTP_OPTION)
    .action(async (options: RemoteOptions & { account: string }, command: Command) => {
      const playbook = client(options, command);
      const rows = [['id', 'status', 'events', 'url', 'description']];
      await failing('listing webhook endpoints', async () => {
        for await (const endpoint of playbook.webhookEndpoints.iterate({
          accountId: account(options.account, command),
        })) {
          rows.push([
            endpoint.id,
            endpoint.status,
            endpoint.events.join(','),
            printable(endpoint.url),
            printable(endpoint.description ?? ''),
          ]);
        }
      });
      write(rows);
    });

  webhooks
    .command('create')
    .description('subscribe an https endpoint to changes; prints its signing secret, shown this once')
    .requiredOption('--account <accountId>', 'the account')
    .requiredOption('--endpoint <url>', 'where events are POSTed (https)')
    .option('--events <types>', 'comma-separated change types, or * for every type', '*')
    .option('--description <text>', 'what the endpoint is for')
    .option(...urlOption)
    .option(...INSECURE_HTTP_OPTION)
    .action(
      async (
        options: RemoteOptions & { account: string; endpoint: string; events: string; description?: string },
        command: Command,
      ) => {
        const playbook = client(options, command);
        const events = options.events.split(',').map((type) => type.trim()) as never;
        const created = await failing('creating the webhook endpoint', () =>
          playbook.webhookEndpoints.create({
            accountId: account(options.account, command),
            url: options.endpoint,
            events,
            ...(options.description === undefined ? {} : { description: options.description }),
          }),
        );
        write([
          ['id', created.id],
          ['status', created.status],
          ['events', created.events.join(',')],
          ['secret', created.secret],
        ]);
        context.stderr.write('Keep the secret where your receiver reads it: it is never shown again.\n');
      },
    );

  webhooks
    .command('test')
    .description('send a test event (webhook.test) to an endpoint; prints the delivery')
    .argument('<endpointId>', 'the endpoint')
    .option(...urlOption)
    .option(...INSECURE_HTTP_OPTION)
    .action(async (endpointId: string, options: RemoteOptions, command: Command) => {
      const playbook = client(options, command);
      const delivery = await failing('sending the test event', () =>
        playbook.webhookEndpoints.test(endpointId),
      );
      write([
        ['delivery', delivery.id],
        ['event', delivery.eventId],
        ['status', delivery.status],
      ]);
      context.stderr.write(`See how it went: playbook webhooks deliveries ${endpointId}\n`);
    });

  webhooks
    .command('deliveries')
    .description("list an endpoint's delivery attempts, newest first, one per line, tab-separated")
    .argument('<endpointId>', 'the endpoint')
    .option('--page <n>', 'the page, of 100 attempts each', '1')
    .option(...urlOption)
    .option(...INSECURE_HTTP_OPTION)
    .action(async (endpointId: string, options: RemoteOptions & { page: string }, command: Command) => {
      const playbook = client(options, command);
      if (!/^[1-9]\d{0,8}$/.test(options.page)) command.error('error: --page must be a page number');
      const page = await failing('listing deliveries', () =>
        playbook.webhookEndpoints.deliveries(endpointId, { page: Number(options.page), pageSize: 100 }),
      );
      const rows = [
        ['at', 'event', 'type', 'attempt', 'outcome', 'status', 'ms', 'next attempt', 'error', 'delivery'],
      ];
      for (const attempt of page.data) {
        rows.push([
          attempt.at,
          attempt.eventId,
          attempt.type,
          String(attempt.attempt),
          attempt.outcome,
          attempt.statusCode === undefined ? '-' : String(attempt.statusCode),
          String(attempt.durationMs),
          attempt.nextAttemptAt ?? '-',
          printable(attempt.error ?? '-'),
          attempt.deliveryId,
        ]);
      }
      write(rows);
      context.stderr.write(
        `page ${page.meta.page} of ${page.meta.pageCount} (${page.meta.total} attempts)\n`,
      );
    });
}

/** A refusal of the service ends the command with exit 1 and one line: status, code, detail, fields. */
async function failing<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (!(error instanceof PlaybookError)) throw error;
    throw new CommandError(`${what} failed: ${printable(error.message)}`);
  }
}
