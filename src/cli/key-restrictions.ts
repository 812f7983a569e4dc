import type { Playbook } from '@playbook/client';
import { type Command, InvalidArgumentError } from 'commander';
import type { Services } from '../composition/services.js';
import {
  type ApiKey,
  type KeyRateLimit,
  type KeyRestrictions,
  type KeyRestrictionsInput,
  type KeyUsage,
  KeyUsageQuery,
  type UpdateApiKeyBody,
  type UsageBucket,
} from '../schemas/identity.js';
import { compileCheck, problemsOf } from '../schemas/schema-check.js';
import type { CliContext } from './context.js';
import { printableJson } from './printable.js';
import {
  callFailed,
  INSECURE_HTTP_OPTION,
  type RemoteOptions,
  serviceTarget,
  URL_OPTION,
  userClient,
} from './service-client.js';

/**
 * D32 on the command line: the restriction flags of `keys create` and `keys restrict`, `keys restrict`
 * itself and `keys usage` with its chart.
 */

/** The flags that give a key's restrictions. */
export interface RestrictionFlags {
  readonly catalog?: string[];
  readonly allowIp?: string[];
  readonly rate?: KeyRateLimit;
}

/** The flag of each restriction, for usage errors naming the field a problem is in. */
const RESTRICTION_FLAGS: Readonly<Record<string, string>> = {
  'restrictions.catalogs': '--catalog',
  'restrictions.allowedIps': '--allow-ip',
  'restrictions.rateLimit': '--rate',
};

/** The flag that gives the field `name` (`restrictions.allowedIps[0]`), if it is a restriction's. */
export function restrictionFlagOf(name: string): string | undefined {
  const field = Object.keys(RESTRICTION_FLAGS).find((prefix) => name.startsWith(prefix));
  return field === undefined ? undefined : RESTRICTION_FLAGS[field];
}

const WINDOW_UNITS: Readonly<Record<string, number>> = { s: 1, m: 60, h: 3600 };

/** `100/60s`, `100/1m`, `5000/1h` (or `100/60`, seconds): a rate as `{ limit, windowSeconds }`. */
export function parseRate(value: string): KeyRateLimit {
  const match = /^(\d{1,10})\/(\d{1,6})([smh]?)$/.exec(value);
  if (!match) throw new InvalidArgumentError('expected requests/window, e.g. 100/60s, 100/1m or 5000/1h');
  return { limit: Number(match[1]), windowSeconds: Number(match[2]) * WINDOW_UNITS[match[3] || 's']! };
}

/** A repeatable option's values, in order. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** Adds the restriction flags to `command`. */
export function withRestrictionFlags(command: Command): Command {
  return command
    .option(
      '--catalog <ref>',
      'restrict the key to a Catalog (org/runbooks, svc/handbook) or an owner (org/*), repeatable',
      collect,
    )
    .option(
      '--allow-ip <address>',
      'take the key only from an address or CIDR range (10.0.0.0/8, 2001:db8::/32), repeatable',
      collect,
    )
    .option('--rate <requests/window>', "the key's own rate limit, e.g. 100/60s", parseRate);
}

/** The restrictions the flags give, or undefined when they give none. */
export function restrictionsOf(flags: RestrictionFlags): KeyRestrictionsInput | undefined {
  const restrictions: KeyRestrictionsInput = {
    ...(flags.catalog ? { catalogs: [...new Set(flags.catalog)] } : {}),
    ...(flags.allowIp ? { allowedIps: [...new Set(flags.allowIp)] } : {}),
    ...(flags.rate ? { rateLimit: flags.rate } : {}),
  };
  return Object.keys(restrictions).length === 0 ? undefined : restrictions;
}

/** A key's restrictions in one line, for people. */
export function describeRestrictions(restrictions: KeyRestrictions | null): string {
  if (restrictions === null) return 'none';
  const { catalogs, allowedIps, rateLimit } = restrictions;
  return [
    catalogs === null ? undefined : `catalogs ${catalogs.join(',')}`,
    allowedIps === null ? undefined : `addresses ${allowedIps.join(',')}`,
    rateLimit === null ? undefined : `rate ${rateLimit.limit}/${rateLimit.windowSeconds}s`,
  ]
    .filter((part) => part !== undefined)
    .join('; ');
}

/** What `--lift` takes, and the field of each. */
const LIFTABLE = { catalogs: 'catalogs', 'allowed-ips': 'allowedIps', rate: 'rateLimit' } as const;

function parseLift(value: string, previous: string[] = []): string[] {
  if (value !== 'all' && !(value in LIFTABLE)) {
    throw new InvalidArgumentError(`expected ${Object.keys(LIFTABLE).join(', ')} or all`);
  }
  return [...previous, value];
}

/** The patch `keys restrict` sends; a usage error when it would change nothing or contradict itself. */
function patchOf(flags: RestrictionFlags & { lift?: string[] }, command: Command): UpdateApiKeyBody {
  const set = restrictionsOf(flags);
  const lift = flags.lift ?? [];
  if (lift.includes('all')) {
    if (set !== undefined || lift.length > 1) command.error('error: --lift all stands alone');
    return { restrictions: null };
  }
  const lifted = Object.fromEntries(
    lift.map((name) => [LIFTABLE[name as keyof typeof LIFTABLE], null]),
  ) as KeyRestrictionsInput;
  const both = Object.keys(lifted).find((field) => set !== undefined && field in set);
  if (both !== undefined) command.error(`error: ${both} is both set and lifted`);
  const restrictions = { ...lifted, ...set };
  if (Object.keys(restrictions).length === 0) {
    command.error('error: give --catalog, --allow-ip, --rate or --lift');
  }
  return { restrictions };
}

const checkUsageQuery = compileCheck(KeyUsageQuery, true);

/** How `keys` commands run on storage as an operator (keys.ts). */
type AsOperator = <T>(work: (services: Services) => Promise<T>) => Promise<T>;

/** `playbook keys restrict` and `playbook keys usage`. */
export function registerKeyRestrictionCommands(
  keys: Command,
  context: CliContext,
  asOperator: AsOperator,
  checkKeyId: (keyId: string, command: Command) => void,
): void {
  /** Does `work` on the storage as an operator, or through the service at `--url` as its user. */
  const acting = <T>(
    options: RemoteOptions,
    command: Command,
    what: string,
    work: { operator: (services: Services) => Promise<T>; user: (playbook: Playbook) => Promise<T> },
  ): Promise<T> => {
    const target = serviceTarget(context, options, command);
    if (target === undefined) return asOperator(work.operator);
    return work.user(userClient(context, target, command)).catch((error) => callFailed(what, error));
  };
  withRestrictionFlags(
    keys
      .command('restrict')
      .description(
        "change an API key's restrictions: each flag given replaces that restriction, --lift removes one; every instance applies it at once",
      )
      .argument('<keyId>', 'the key id (the part between the environment and the secret)'),
  )
    .option(
      '--lift <restriction>',
      'remove a restriction: catalogs, allowed-ips, rate or all, repeatable',
      parseLift,
    )
    .option('--json', 'print the key as the API shows it, on one line')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .action(
      async (
        keyId: string,
        options: RestrictionFlags & RemoteOptions & { lift?: string[]; json?: boolean },
        command: Command,
      ) => {
        checkKeyId(keyId, command);
        const patch = patchOf(options, command);
        const key: ApiKey = await acting(options, command, 'keys restrict', {
          operator: (services) => services.identity.keys.update(keyId, patch),
          user: (playbook) => playbook.apiKeys.update(keyId, patch),
        });
        context.stdout.write(
          options.json
            ? `${printableJson(key)}\n`
            : `key ${keyId} restrictions: ${describeRestrictions(key.restrictions)}\n`,
        );
      },
    );

  keys
    .command('usage')
    .description(
      'show how an API key was used: requests per day (or hour) by outcome, as a chart, and its last use',
    )
    .argument('<keyId>', 'the key id (the part between the environment and the secret)')
    .option('--from <date-time>', 'the first day (or hour) shown; 7 days back by default, at most 90')
    .option('--to <date-time>', 'the end of what is shown; now by default')
    .option('--hourly', 'by hour rather than by day')
    .option('--json', 'print the usage as the API answers it, on one line')
    .option(...URL_OPTION)
    .option(...INSECURE_HTTP_OPTION)
    .action(
      async (
        keyId: string,
        options: RemoteOptions & { from?: string; to?: string; hourly?: boolean; json?: boolean },
        command: Command,
      ) => {
        checkKeyId(keyId, command);
        const query: KeyUsageQuery = {
          ...(options.from === undefined ? {} : { from: options.from }),
          ...(options.to === undefined ? {} : { to: options.to }),
          granularity: options.hourly ? 'hour' : 'day',
        };
        const [problem] = problemsOf(checkUsageQuery, query);
        if (problem) command.error(`error: --${problem.name} ${problem.message}`);
        const usage: KeyUsage = await acting(options, command, 'keys usage', {
          operator: (services) => services.identity.keys.usage(keyId, query),
          user: (playbook) => playbook.apiKeys.usage(keyId, query),
        });
        context.stdout.write(options.json ? `${printableJson(usage)}\n` : usageChart(usage));
      },
    );
}

/** The outcomes of a bucket, in the order the chart stacks them, each with its mark. */
const SERIES = [
  ['success', '█', 'success'],
  ['clientError', '▓', 'client error'],
  ['unauthorized', '▒', 'unauthorized'],
  ['rateLimited', '░', 'rate limited'],
  ['serverError', '×', 'server error'],
] as const;
/** The widest bar, in characters. */
const BAR_WIDTH = 40;

/**
 * A key's usage as a small chart for a terminal: one line per bucket, a bar of its requests stacked
 * by outcome (scaled to the busiest bucket), its total and its counts, a legend and the last use.
 */
export function usageChart(usage: KeyUsage): string {
  const total = (bucket: UsageBucket) => SERIES.reduce((sum, [field]) => sum + bucket[field], 0);
  const busiest = Math.max(1, ...usage.buckets.map(total));
  const label = (start: string) => (usage.granularity === 'day' ? start.slice(0, 10) : start.slice(0, 16));
  const lines = usage.buckets.map((bucket) => {
    let bar = '';
    for (const [field, mark] of SERIES) {
      const count = bucket[field];
      // Any outcome that happened shows, however small beside the others.
      if (count > 0) bar += mark.repeat(Math.max(1, Math.round((count / busiest) * BAR_WIDTH)));
    }
    const counts = SERIES.map(([field]) => bucket[field]).join('/');
    return `${label(bucket.start)}  ${bar.padEnd(BAR_WIDTH + SERIES.length)}  ${String(total(bucket)).padStart(7)}  ${counts}`;
  });
  const legend = SERIES.map(([, mark, name]) => `${mark} ${name}`).join('  ');
  const last =
    usage.lastUsed === null
      ? 'never used'
      : `last used ${usage.lastUsed.at}${usage.lastUsed.address === null ? '' : ` from ${usage.lastUsed.address}`}`;
  return `${[
    `API key ${usage.keyId}: requests per ${usage.granularity} (counts: ${SERIES.map(([, , name]) => name).join('/')})`,
    ...lines,
    legend,
    last,
  ].join('\n')}\n`;
}
