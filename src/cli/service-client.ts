import { isLoopbackUrl, Playbook, PlaybookError, type PlaybookOptions } from '@playbook/client';
import type { Command } from 'commander';
import { type CliContext, CommandError } from './context.js';
import { printable } from './printable.js';

/** The option of every command that can talk to a running service instead of its storage. */
export const URL_OPTION = [
  '--url <baseUrl>',
  'where the running service is, e.g. https://playbook.example.com (default: PLAYBOOK_URL)',
] as const;

/** The option that lets a command send its credential over plain HTTP beyond loopback (D14). */
export const INSECURE_HTTP_OPTION = [
  '--insecure-http',
  'send the key or token over plain http:// to a host that is not loopback, readable by anyone on the way (prints a warning)',
] as const;

/** What a command that talks to a running service was told of where it is. */
export interface RemoteOptions {
  readonly url?: string;
  readonly insecureHttp?: boolean;
}

/** Where a command reaches the running service, in the client's terms. */
export type ServiceTarget = Pick<PlaybookOptions, 'baseUrl' | 'allowInsecureHttp'>;

/**
 * The running service a command talks to: `--url`, else `PLAYBOOK_URL`, else `fallback`; undefined
 * when none is given. Bad usage (exit 2), before anything is sent or any name looked up: a value that
 * is not an http(s) URL or holds a user name or password, and plain `http:` to a host that is not
 * loopback by its text (D14) unless `--insecure-http` is given, which warns on stderr.
 */
export function serviceTarget(
  context: CliContext,
  options: RemoteOptions,
  command: Command,
  fallback: string,
): ServiceTarget;
export function serviceTarget(
  context: CliContext,
  options: RemoteOptions,
  command: Command,
): ServiceTarget | undefined;
export function serviceTarget(
  context: CliContext,
  options: RemoteOptions,
  command: Command,
  fallback?: string,
): ServiceTarget | undefined {
  const from = options.url === undefined ? 'PLAYBOOK_URL' : '--url';
  const text = options.url ?? (context.env.PLAYBOOK_URL || fallback);
  if (text === undefined) return undefined;
  const url = /^https?:\/\/[^\s/]/.test(text) && URL.canParse(text) ? new URL(text) : undefined;
  if (url === undefined || url.username !== '' || url.password !== '') {
    command.error(`error: ${from} must be an http(s) URL, without a user name or password`);
  }
  if (url.protocol === 'https:' || isLoopbackUrl(url)) return { baseUrl: text };
  if (options.insecureHttp !== true) {
    command.error(
      `error: ${from} is plain http to ${printable(url.host)}, which is not loopback: the key or token would cross the network readable by anyone on the way; use https://, or give --insecure-http to send it anyway`,
    );
  }
  context.stderr.write(
    `playbook: warning: --insecure-http: the key or token goes to ${printable(url.origin)} over plain http, readable by anyone on the way\n`,
  );
  return { baseUrl: text, allowInsecureHttp: true };
}

/**
 * A client of the service at `target` acting as a user, with the access token of
 * `PLAYBOOK_ACCESS_TOKEN` (never a flag: flags end up in shell histories and CI logs). Key management,
 * the audit list and webhooks take a user's access token, never an API key.
 */
export function userClient(
  context: CliContext,
  target: ServiceTarget,
  command: Command,
  options: { readonly cache?: boolean; readonly missing?: string } = {},
): Playbook {
  const accessToken = context.env.PLAYBOOK_ACCESS_TOKEN;
  if (!accessToken) {
    command.error(
      options.missing ??
        `error: PLAYBOOK_ACCESS_TOKEN must hold a user access token to act through ${target.baseUrl} ` +
          '(without --url and PLAYBOOK_URL, the command acts on the configured storage as an operator)',
    );
  }
  return new Playbook({ accessToken, ...target, ...(options.cache ? { cache: true } : {}) });
}

/**
 * A client of the service at `target` with the API key of `PLAYBOOK_API_KEY` (never a flag), which
 * must grant `scope`; a key that does not hold is refused offline, and never printed.
 */
export function keyClient(
  context: CliContext,
  target: ServiceTarget,
  command: Command,
  scope: 'playbook:read' | 'playbook:write',
  options: { readonly cache?: boolean } = {},
): Playbook {
  const apiKey = context.env.PLAYBOOK_API_KEY;
  if (!apiKey) command.error(`error: PLAYBOOK_API_KEY must hold an API key with the ${scope} scope`);
  try {
    return new Playbook({ apiKey, ...target, ...(options.cache ? { cache: true } : {}) });
  } catch {
    command.error('error: PLAYBOOK_API_KEY is not a valid API key');
  }
}

/**
 * What the service's refusal (or a failure on the way) ends the command with: exit 1 and one line
 * naming the status, the problem's code and detail, its fields, and the request id to give the
 * operators. Anything else is rethrown as it is.
 */
export function callFailed(what: string, error: unknown): never {
  if (!(error instanceof PlaybookError)) throw error;
  // The service's words are text from elsewhere: shown escaped, like text from storage.
  throw new CommandError(`${what} failed: ${printable(error.message)}`);
}
