import { setTimeout as sleep } from 'node:timers/promises';
import type { Playbook } from '@playbook/client';
import type { Command } from 'commander';
import { AuditLog } from '../audit/audit-log.js';
import { DEFAULT_POLL_MS } from '../changes/change-follower.js';
import type { AuditEvent } from '../schemas/audit.js';
import { MAX_PAGE_SIZE } from '../schemas/common.js';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';
import type { CliContext } from './context.js';
import { printable, printableJson } from './printable.js';
import {
  callFailed,
  INSECURE_HTTP_OPTION,
  type RemoteOptions,
  serviceTarget,
  URL_OPTION,
  userClient,
} from './service-client.js';

/** Events read from storage per query. */
const BATCH = 500;

/**
 * How often `--follow` asks a running service for what is new: a few requests a minute, far inside
 * any credential's rate limit, and soon enough for a person watching.
 */
const REMOTE_POLL_MS = 2000;

interface AuditOptions extends RemoteOptions {
  readonly account: string;
  readonly follow?: boolean;
  readonly json?: boolean;
}

/**
 * `playbook audit --account <id> [--follow] [--json]` (D23, D26, D29): an account's changes as the
 * audit list shows them, newest first; with `--follow`, the existing ones oldest first and then each
 * new one as it commits, until SIGINT or SIGTERM (exit 0). With `--url` or `PLAYBOOK_URL`, read through
 * the running service as the user of `PLAYBOOK_ACCESS_TOKEN`; without, from the configured storage's
 * change log, as an operator. Text lines are tab-separated under a header; `--json` prints one JSON
 * object per event and per line (JSON Lines), the API's event shape.
 *
 * @example
 * npx playbook audit --account demo
 * npx playbook audit --account demo --follow --json | jq -r .summary
 */
export function registerAuditCommand(program: Command, context: CliContext): void {
  program
    .command('audit')
    .description(
      "list an account's changes, newest first; with --follow, the existing ones oldest first, then each new one as it happens",
    )
    .requiredOption('--account <accountId>', 'the account')
    .option('--follow', 'keep printing changes as they happen, until interrupted (Ctrl-C)')
    .option('--json', 'print one JSON object per change and per line')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .addHelpText(
      'after',
      `
With --url or PLAYBOOK_URL, the changes are read through the running service as the user of the
access token in PLAYBOOK_ACCESS_TOKEN. Without them, from the configured storage, as an operator.`,
    )
    .action(async (options: AuditOptions, command: Command) => {
      if (!ACCOUNT_ID_PATTERN.test(options.account)) {
        command.error(`error: --account ${JSON.stringify(options.account)} is not an account id`);
      }
      const target = serviceTarget(context, options, command);
      const playbook =
        target === undefined
          ? undefined
          : userClient(context, target, command, { cache: options.follow === true });
      const stop = stopped(context, options.follow === true);
      const print = printer(context, options);
      try {
        if (playbook) await fromService(playbook, options, print, stop.signal);
        else await fromStorage(context, options, print, stop.signal);
      } finally {
        stop.dispose();
      }
    });
}

type Print = (event: AuditEvent) => void;

/** Writes the header (text only) at once, and then each event as one line. */
function printer(context: CliContext, options: AuditOptions): Print {
  if (options.json) return (event) => context.stdout.write(`${printableJson(event)}\n`);
  context.stdout.write('at\taction\tactor\ttarget\trequest\tsummary\n');
  return (event) => {
    const actor = event.actor.id === undefined ? event.actor.type : `${event.actor.type}:${event.actor.id}`;
    const fields = [event.at, event.action, actor, event.target, event.requestId ?? '-', event.summary];
    // Actors, targets and summaries hold text from callers: shown escaped, never acted upon.
    context.stdout.write(`${fields.map(printable).join('\t')}\n`);
  };
}

/**
 * A signal aborted when the output is gone (a reader such as `head` closed the pipe), and, when
 * following, by the first SIGINT or SIGTERM: either ends the command with exit 0.
 */
export function stopped(context: CliContext, follow: boolean): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const abort = () => controller.abort();
  // Left in place: a failed write says so after the fact, possibly once the command has ended.
  context.stdout.on('error', abort);
  if (follow) {
    process.on('SIGINT', abort);
    process.on('SIGTERM', abort);
  }
  return {
    signal: controller.signal,
    dispose: () => {
      process.off('SIGINT', abort);
      process.off('SIGTERM', abort);
    },
  };
}

/** Waits `ms`, or less when `signal` aborts; never throws. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch(() => {});
}

/** From the change log of the configured storage, by `seq` (D26). */
async function fromStorage(
  context: CliContext,
  options: AuditOptions,
  print: Print,
  signal: AbortSignal,
): Promise<void> {
  const storage = await context.openStorage();
  try {
    const audit = new AuditLog(storage.databases.primary);
    if (!options.follow) {
      let before: number | undefined;
      while (!signal.aborted) {
        const batch = await audit.newestBefore(options.account, before, BATCH);
        for (const { event } of batch) if (!signal.aborted) print(event);
        if (batch.length < BATCH) return;
        before = batch.at(-1)!.seq;
      }
      return;
    }
    // Read on from the last change seen: no change commits behind one a reader has seen (D26), so
    // none is missed, and the account's index makes each look a single seek.
    let after = 0;
    while (!signal.aborted) {
      const batch = await audit.oldestAfter(options.account, after, BATCH);
      for (const { seq, event } of batch) {
        if (signal.aborted) return;
        print(event);
        after = seq;
      }
      if (batch.length < BATCH) await pause(DEFAULT_POLL_MS, signal);
    }
  } finally {
    await storage.close();
  }
}

/**
 * From the audit list of a running service. Its pages are offsets into a list that grows at the
 * front, so a page read after a new change repeats the end of the one before: repeats are dropped by
 * id, and a follow reads from the newest back to the last event it printed.
 */
async function fromService(
  playbook: Playbook,
  options: AuditOptions,
  print: Print,
  signal: AbortSignal,
): Promise<void> {
  const newestFirst = async function* (): AsyncGenerator<AuditEvent> {
    const seen = new Set<string>();
    const query = { accountId: options.account, pageSize: MAX_PAGE_SIZE };
    try {
      for await (const event of playbook.auditEvents.iterate(query, { signal })) {
        if (seen.has(event.id)) continue;
        seen.add(event.id);
        yield event;
      }
    } catch (error) {
      // Stopped while asking: what was printed stands, and the command ends as asked.
      if (signal.aborted) return;
      callFailed('audit', error);
    }
  };
  if (!options.follow) {
    for await (const event of newestFirst()) {
      if (signal.aborted) return;
      print(event);
    }
    return;
  }
  // Where the sync feed (D27) plugs in once the service offers it with held requests: a request that
  // is answered when the account's next change commits replaces this poll of the audit list.
  let last: string | undefined;
  while (!signal.aborted) {
    const fresh: AuditEvent[] = [];
    for await (const event of newestFirst()) {
      if (event.id === last) break;
      fresh.push(event);
    }
    if (signal.aborted) return;
    for (const event of fresh.reverse()) print(event);
    last = fresh.at(-1)?.id ?? last;
    await pause(REMOTE_POLL_MS, signal);
  }
}
