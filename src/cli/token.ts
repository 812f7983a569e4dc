import { type Command, InvalidArgumentError } from 'commander';
import { DevTokenSigner } from '../auth/dev-signer.js';
import { deploymentEnvironment } from '../foundation/config.js';
import { ACCOUNT_ID_PATTERN } from '../schemas/identity.js';
import { type CliContext, CommandError } from './context.js';

const DEFAULT_TTL_SECONDS = 3600;

function parseTtl(value: string): number {
  const seconds = Number(value);
  if (!/^\d{1,9}$/.test(value) || seconds < 1) throw new InvalidArgumentError('expected whole seconds');
  return seconds;
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/**
 * `playbook token --user <userId> --account <accountId> [--account …] [--ttl <seconds>]` (D9, D14):
 * mints a user access token with the embedded dev signer and prints only the token, so that it can
 * be captured in a shell variable. Refuses in a `live` deployment (bad usage, exit 2, whatever else is
 * configured), which never signs its own tokens, and when `PLAYBOOK_JWKS_URL` is set: tokens then come
 * from the identity provider, and a locally signed one would not verify anyway.
 *
 * @example
 * TOKEN=$(npx playbook token --user ada --account demo --ttl 600)
 * curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/v3/identity/api-keys?accountId=demo
 */
export function registerTokenCommand(program: Command, context: CliContext): void {
  program
    .command('token')
    .description('mint a user access token with the embedded dev signer; prints only the token')
    .requiredOption('--user <userId>', 'the user (the token subject)')
    .option('--account <accountId>', 'an account the user may act for (repeatable)', collect, [])
    .option('--ttl <seconds>', `lifetime in seconds (default ${DEFAULT_TTL_SECONDS})`, parseTtl)
    .action(async (options: { user: string; account: string[]; ttl?: number }, command: Command) => {
      // Before the rest of the configuration is read, so that no setting of a live deployment can
      // lead to a signer, nor to a key file made in its data directory.
      if (deploymentEnvironment(context.env) === 'live') {
        command.error(
          'error: playbook token does not run with PLAYBOOK_ENVIRONMENT=live: a live deployment accepts only access tokens from its identity provider (PLAYBOOK_JWKS_URL)',
        );
      }
      if (options.user.trim() === '' || options.user.length > 256) {
        command.error('error: --user must be 1-256 characters');
      }
      if (options.account.length === 0)
        command.error('error: at least one --account <accountId> is required');
      const invalid = options.account.find((account) => !ACCOUNT_ID_PATTERN.test(account));
      if (invalid !== undefined)
        command.error(`error: --account ${JSON.stringify(invalid)} is not an account id`);
      const config = context.config();
      if (options.ttl !== undefined && options.ttl > config.jwt.maxTtlS) {
        // The service would refuse the token (D20): say so now rather than at its first use.
        command.error(`error: --ttl must be at most ${config.jwt.maxTtlS} seconds (PLAYBOOK_JWT_MAX_TTL_S)`);
      }
      if (config.jwt.jwksUrl !== undefined) {
        throw new CommandError(
          'PLAYBOOK_JWKS_URL is set: access tokens come from that identity provider, not from playbook token',
        );
      }
      const signer = DevTokenSigner.forDeployment(config);
      if (!signer) throw new CommandError('this deployment has no embedded signer');
      const token = await signer.mint({
        subject: options.user,
        accounts: options.account,
        ttlSeconds: options.ttl ?? DEFAULT_TTL_SECONDS,
      });
      context.stdout.write(`${token}\n`);
    });
}
