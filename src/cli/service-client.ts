import { Playbook, PlaybookError } from '@playbook/client';
import type { Command } from 'commander';
import { type CliContext, CommandError } from './context.js';
import { printable } from './printable.js';

/** The option of every command that can talk to a running service instead of its storage. */
export const URL_OPTION = [
  '--url <baseUrl>',
  'where the running service is, e.g. https://playbook.example.com (default: PLAYBOOK_URL)',
] as const;

/**
 * The running service a command talks to: `--url`, else `PLAYBOOK_URL`; undefined when neither is
 * given. A value that is not an http(s) URL is bad usage (exit 2).
 */
export function serviceUrl(
  context: CliContext,
  option: string | undefined,
  command: Command,
): string | undefined {
  const url = option ?? (context.env.PLAYBOOK_URL || undefined);
  if (url === undefined) return undefined;
  const from = option === undefined ? 'PLAYBOOK_URL' : '--url';
  if (!/^https?:\/\/[^\s/]/.test(url)) command.error(`error: ${from} must be an http(s) URL`);
  return url;
}

/**
 * A client of the service at `url` acting as a user, with the access token of `PLAYBOOK_ACCESS_TOKEN`
 * (never a flag: flags end up in shell histories and CI logs). Key management and the audit list take
 * a user's access token, never an API key.
 */
export function userClient(
  context: CliContext,
  url: string,
  command: Command,
  options: { readonly cache?: boolean } = {},
): Playbook {
  const accessToken = context.env.PLAYBOOK_ACCESS_TOKEN;
  if (!accessToken) {
    command.error(
      `error: PLAYBOOK_ACCESS_TOKEN must hold a user access token to act through ${url} ` +
        '(without --url and PLAYBOOK_URL, the command acts on the configured storage as an operator)',
    );
  }
  return new Playbook({ accessToken, baseUrl: url, ...(options.cache ? { cache: true } : {}) });
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
