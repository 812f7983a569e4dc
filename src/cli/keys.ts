import fs from 'node:fs/promises';
import path from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import type { Services } from '../composition/services.js';
import { ConflictError, InputError, LimitError, NotFoundError } from '../foundation/errors.js';
import { byText } from '../foundation/text-order.js';
import { findApiKeys, KEY_ID_PATTERN } from '../schemas/api-key-format.js';
import {
  ACCOUNT_ID_PATTERN,
  type ApiKey,
  CreateApiKeyBody,
  type CreatedApiKey,
  DEFAULT_ROLL_OVERLAP_S,
  MAX_ROLL_OVERLAP_S,
  SCOPES,
  type Scope,
} from '../schemas/identity.js';
import { compileCheck, problemsOf } from '../schemas/schema-check.js';
import { type CliContext, CommandError } from './context.js';
import {
  collect,
  describeRestrictions,
  type RestrictionFlags,
  registerKeyRestrictionCommands,
  restrictionFlagOf,
  restrictionsOf,
  withRestrictionFlags,
} from './key-restrictions.js';
import { printable, printableJson } from './printable.js';
import {
  callFailed,
  INSECURE_HTTP_OPTION,
  type RemoteOptions,
  serviceTarget,
  URL_OPTION,
  userClient,
} from './service-client.js';

const KEY_ID = new RegExp(KEY_ID_PATTERN);

/** Every field of a key creation, checked before anything is sent or stored, as the service checks it. */
const checkCreation = compileCheck(CreateApiKeyBody, true);

/** The flag that gives each field of a key creation, for usage errors. */
const FLAG_OF: Readonly<Record<string, string>> = {
  name: '--name',
  accountId: '--account',
  scopes: '--scope',
  expiresAt: '--expires-at',
};

/** RFC 3339 date-times, with `Z` or an offset: `2030-01-31T18:00:00Z`, `2030-01-31T19:00:00+01:00`. */
const RFC_3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:\d{2})$/;

function statusOf(key: ApiKey, now: number): string {
  if (key.revokedAt !== undefined) return 'revoked';
  if (key.expiresAt !== undefined && Date.parse(key.expiresAt) <= now) return 'expired';
  return 'active';
}

function parseOverlap(value: string): number {
  const seconds = Number(value);
  if (!/^\d{1,6}$/.test(value) || seconds > MAX_ROLL_OVERLAP_S) {
    throw new InvalidArgumentError(`expected whole seconds, 0 to ${MAX_ROLL_OVERLAP_S} (a week)`);
  }
  return seconds;
}

interface Output {
  readonly json?: boolean;
}

/**
 * `playbook keys create|roll|revoke|list|restrict|usage` and `playbook keys scan` (D14, D22, D29, D32): what an account
 * owner does with API keys. With `--url` or `PLAYBOOK_URL`, the commands act through the running
 * service as the user of `PLAYBOOK_ACCESS_TOKEN` (key management takes an access token, never an API
 * key, D8); without, on the configured storage as an operator, through the same services and so the
 * same change log, which names the operator as the actor. A new key is printed once, alone on stdout,
 * so that a shell can capture it, and what is said about it goes to stderr (or all of it to stdout as
 * JSON). The list never shows a secret: only the key id, the public part of the key string.
 *
 * @example
 * KEY=$(npx playbook keys create --account demo --name first --scope playbook:read)
 * npx playbook keys list --account demo
 * npx playbook keys roll 3fZk9QwPq0LmT2Ab --overlap 3600
 * npx playbook keys revoke 3fZk9QwPq0LmT2Ab
 * npx playbook keys create --account demo --name ci --scope playbook:read --catalog org/runbooks --rate 100/60s
 * npx playbook keys restrict 3fZk9QwPq0LmT2Ab --allow-ip 10.0.0.0/8 --lift rate
 * npx playbook keys usage 3fZk9QwPq0LmT2Ab
 * PLAYBOOK_URL=https://playbook.example.com PLAYBOOK_ACCESS_TOKEN=$TOKEN npx playbook keys list --account acme
 * npx playbook keys scan .
 */
export function registerKeysCommand(program: Command, context: CliContext): void {
  const keys = program
    .command('keys')
    .description(
      "create, roll, revoke, restrict or list an account's API keys, show a key's usage, or scan files for keys",
    )
    .addHelpText(
      'after',
      `
With --url or PLAYBOOK_URL, create, roll, revoke, list, restrict and usage act through the running service as the
user of the access token in PLAYBOOK_ACCESS_TOKEN (from your identity provider, or from playbook
token on the embedded default). Without them, they act on the configured storage, as an operator.`,
    );

  /** Runs `work` on the configured storage, as an operator; a refusal ends in one line (exit 1). */
  async function asOperator<T>(work: (services: Services) => Promise<T>): Promise<T> {
    const services = await context.openServices();
    try {
      return await work(services);
    } catch (error) {
      if (
        error instanceof NotFoundError ||
        error instanceof ConflictError ||
        error instanceof LimitError ||
        error instanceof InputError
      ) {
        throw new CommandError(error.message);
      }
      throw error;
    } finally {
      await services.close();
    }
  }

  /** A new key: alone on stdout (the one time it is shown) and what it is on stderr; or all as JSON. */
  function printCreated(created: CreatedApiKey, said: string, options: Output): void {
    if (options.json) {
      context.stdout.write(`${printableJson(created)}\n`);
      return;
    }
    context.stdout.write(`${created.key}\n`);
    context.stderr.write(`${said}; the key is shown this once: keep it secret\n`);
  }

  withRestrictionFlags(
    keys.command('create').description('create an API key for an account and print it, once'),
  )
    .requiredOption('--account <accountId>', 'the account (created when absent)')
    .requiredOption('--name <text>', 'a label for the key, e.g. ci-deploy')
    .requiredOption(
      '--scope <scope>',
      `a scope to grant, repeatable: ${SCOPES.join(' or ')} (write does not imply read)`,
      collect,
    )
    .option('--expires-at <date-time>', 'when the key stops working, e.g. 2030-01-31T18:00:00Z')
    .option('--json', 'print the key and its details as one JSON object on stdout')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .action(
      async (
        options: Output &
          RemoteOptions &
          RestrictionFlags & { account: string; name: string; scope: string[]; expiresAt?: string },
        command: Command,
      ) => {
        if (!ACCOUNT_ID_PATTERN.test(options.account)) {
          command.error(`error: --account ${JSON.stringify(options.account)} is not an account id`);
        }
        const unknown = options.scope.find((scope) => !(SCOPES as readonly string[]).includes(scope));
        if (unknown !== undefined) {
          command.error(
            `error: --scope ${JSON.stringify(unknown)} is not a scope (known: ${SCOPES.join(', ')})`,
          );
        }
        let expiresAt: string | undefined;
        if (options.expiresAt !== undefined) {
          const at = RFC_3339.test(options.expiresAt) ? Date.parse(options.expiresAt) : Number.NaN;
          if (Number.isNaN(at)) {
            command.error('error: --expires-at must be an RFC 3339 date-time, e.g. 2030-01-31T18:00:00Z');
          }
          if (at <= Date.now()) command.error('error: --expires-at must be in the future');
          expiresAt = new Date(at).toISOString();
        }
        const restrictions = restrictionsOf(options);
        const input: CreateApiKeyBody = {
          name: options.name,
          accountId: options.account,
          // The same scope given twice is granted once.
          scopes: [...new Set(options.scope)] as Scope[],
          ...(expiresAt === undefined ? {} : { expiresAt }),
          ...(restrictions === undefined ? {} : { restrictions }),
        };
        const [problem] = problemsOf(checkCreation, input);
        if (problem) {
          const flag = FLAG_OF[problem.name] ?? restrictionFlagOf(problem.name) ?? problem.name;
          command.error(`error: ${flag} ${problem.message}`);
        }
        const target = serviceTarget(context, options, command);
        let created: CreatedApiKey;
        if (target === undefined) {
          created = await asOperator((services) => services.identity.keys.create(input));
        } else {
          const playbook = userClient(context, target, command);
          created = await playbook.apiKeys.create(input).catch((error) => callFailed('keys create', error));
        }
        const expiry = created.expiresAt === undefined ? '' : `, until ${created.expiresAt}`;
        const limited =
          created.restrictions === null
            ? ''
            : `, restricted to ${describeRestrictions(created.restrictions)}`;
        printCreated(
          created,
          `API key ${created.id} created for account ${created.accountId} (${created.scopes.join(', ')}${expiry}${limited})`,
          options,
        );
      },
    );

  keys
    .command('roll')
    .description(
      'replace an API key with a new one of the same name, account and scopes, and print it, once; ' +
        'the old key keeps working for the overlap, then expires',
    )
    .argument('<keyId>', 'the key id (the part between the environment and the secret)')
    .option(
      '--overlap <seconds>',
      `how long the old key keeps working, 0 to ${MAX_ROLL_OVERLAP_S} (default ${DEFAULT_ROLL_OVERLAP_S}, a day)`,
      parseOverlap,
    )
    .option('--json', 'print the new key and its details as one JSON object on stdout')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .action(
      async (keyId: string, options: Output & RemoteOptions & { overlap?: number }, command: Command) => {
        if (!KEY_ID.test(keyId)) command.error(`error: ${JSON.stringify(keyId)} is not a key id`);
        const overlapSeconds = options.overlap ?? DEFAULT_ROLL_OVERLAP_S;
        const target = serviceTarget(context, options, command);
        let created: CreatedApiKey;
        if (target === undefined) {
          created = await asOperator((services) =>
            services.identity.keys.roll(keyId, overlapSeconds).catch((error: unknown) => {
              throw error instanceof NotFoundError ? new CommandError(`no API key ${keyId}`) : error;
            }),
          );
        } else {
          const playbook = userClient(context, target, command);
          created = await playbook.apiKeys
            .roll(keyId, { overlapSeconds })
            .catch((error) => callFailed('keys roll', error));
        }
        const old =
          overlapSeconds === 0
            ? `${keyId} no longer works`
            : `${keyId} keeps working for ${overlapSeconds} seconds, then expires`;
        printCreated(created, `API key ${keyId} rolled: ${created.id} replaces it; ${old}`, options);
      },
    );

  keys
    .command('revoke')
    .description('revoke an API key; running servers refuse it within a second')
    .argument('<keyId>', 'the key id (the part between the environment and the secret)')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .action(async (keyId: string, options: RemoteOptions, command: Command) => {
      if (!KEY_ID.test(keyId)) command.error(`error: ${JSON.stringify(keyId)} is not a key id`);
      const target = serviceTarget(context, options, command);
      if (target !== undefined) {
        const playbook = userClient(context, target, command);
        // Idempotent over HTTP: the answer does not say whether the key was revoked before.
        await playbook.apiKeys.revoke(keyId).catch((error) => callFailed('keys revoke', error));
        context.stdout.write(`key ${keyId} revoked\n`);
        return;
      }
      const outcome = await asOperator((services) => services.identity.keys.revoke(keyId));
      if (outcome === 'not-found') throw new CommandError(`no API key ${keyId}`);
      context.stdout.write(
        outcome === 'revoked' ? `key ${keyId} revoked\n` : `key ${keyId} was already revoked\n`,
      );
    });

  keys
    .command('list')
    .description("list an account's API keys, one per line, tab-separated, without their secrets")
    .requiredOption('--account <accountId>', 'the account')
    .option('--json', 'print the keys as one JSON array, as the API lists them')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .action(async (options: Output & RemoteOptions & { account: string }, command: Command) => {
      if (!ACCOUNT_ID_PATTERN.test(options.account)) {
        command.error(`error: --account ${JSON.stringify(options.account)} is not an account id`);
      }
      const target = serviceTarget(context, options, command);
      let list: ApiKey[] = [];
      if (target === undefined) {
        list = await asOperator((services) => services.identity.keys.list(options.account));
      } else {
        const playbook = userClient(context, target, command);
        try {
          for await (const key of playbook.apiKeys.iterate({ accountId: options.account, pageSize: 100 })) {
            list.push(key);
          }
        } catch (error) {
          callFailed('keys list', error);
        }
      }
      if (options.json) {
        context.stdout.write(`${printableJson(list)}\n`);
        return;
      }
      const now = Date.now();
      const lines = [
        ['id', 'status', 'environment', 'scopes', 'created', 'expires', 'last used', 'name', 'restrictions'],
      ];
      for (const key of list) {
        lines.push([
          key.id,
          statusOf(key, now),
          key.environment,
          key.scopes.join(','),
          key.createdAt,
          key.expiresAt ?? '-',
          key.lastUsedAt ?? '-',
          // A name is free text: tabs, line breaks and terminal escapes are shown escaped.
          printable(key.name),
          describeRestrictions(key.restrictions),
        ]);
      }
      context.stdout.write(`${lines.map((line) => line.join('\t')).join('\n')}\n`);
    });

  registerKeyRestrictionCommands(keys, context, asOperator, (keyId, command) => {
    if (!KEY_ID.test(keyId)) command.error(`error: ${JSON.stringify(keyId)} is not a key id`);
  });

  keys
    .command('scan')
    .description(
      'find API keys in files, checking their checksums offline; exit 1 when one is found. Folders are walked, but for .git and node_modules',
    )
    .argument('<path...>', 'files or folders')
    .action(async (paths: string[], _options: unknown, command: Command) => {
      let keysFound = 0;
      let lookAlikes = 0;
      for (const start of paths) {
        const stat = await fs.lstat(start).catch(() => null);
        if (!stat) command.error(`error: ${JSON.stringify(start)} does not exist`);
        for await (const file of filesUnder(start, stat!.isDirectory())) {
          // Keys are ASCII: read as Latin-1, any file (binary too) keeps every key byte for byte.
          const text = await fs.readFile(file, 'latin1');
          for (const found of findApiKeys(text)) {
            if (!found.parsed) {
              lookAlikes++;
              continue;
            }
            keysFound++;
            const { environment, keyId } = found.parsed;
            // The key id is public; the secret is never printed.
            context.stdout.write(
              `${printable(file)}:${found.line}:${found.column}: ${environment} API key ${keyId} (checksum holds)\n`,
            );
          }
        }
      }
      const ignored =
        lookAlikes === 0
          ? ''
          : `; ${lookAlikes} look-alike${lookAlikes === 1 ? '' : 's'} with a failing checksum ignored`;
      if (keysFound > 0) {
        throw new CommandError(
          `found ${keysFound} API key${keysFound === 1 ? '' : 's'}${ignored}: revoke ${keysFound === 1 ? 'it' : 'them'} (or roll) and remove ${keysFound === 1 ? 'it' : 'them'} from the files`,
        );
      }
      context.stdout.write(`no API keys found${ignored}\n`);
    });
}

/** Folders that hold other people's files or history, not the project's own. */
const SKIPPED = new Set(['.git', 'node_modules']);

/** Regular files at or under `start`; symbolic links are not followed. */
async function* filesUnder(start: string, isDirectory: boolean): AsyncGenerator<string> {
  if (!isDirectory) {
    yield start;
    return;
  }
  const entries = await fs.readdir(start, { withFileTypes: true });
  entries.sort(byText((entry) => entry.name));
  for (const entry of entries) {
    const child = path.join(start, entry.name);
    if (entry.isDirectory() && !SKIPPED.has(entry.name)) yield* filesUnder(child, true);
    else if (entry.isFile()) yield child;
  }
}
