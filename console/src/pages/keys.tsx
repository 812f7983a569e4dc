import type { ApiKey, CreatedApiKey } from '@playbook/client';
import { useCallback, useState } from 'preact/hooks';
import { ActionDialog } from '../components/action-dialog';
import { when } from '../components/format';
import { NoAccount, PageHeader } from '../components/layout';
import { useAccountLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import { OnceShownSecret } from '../components/secret';
import type { SignedIn } from '../session';
import { EditRestrictionsDialog, KeyRestrictions, LiftRestrictionsDialog } from './key-restrictions';
import { KeyUsageDialog } from './key-usage';

const SCOPES = ['playbook:read', 'playbook:write'] as const;
const OVERLAPS = [
  { label: 'None: the old key stops at once', seconds: 0 },
  { label: 'One hour', seconds: 3600 },
  { label: 'One day', seconds: 86_400 },
  { label: 'One week', seconds: 604_800 },
] as const;

type Action =
  | { readonly kind: 'create' }
  | { readonly kind: 'roll'; readonly key: ApiKey }
  | { readonly kind: 'revoke'; readonly key: ApiKey }
  | { readonly kind: 'restrict'; readonly key: ApiKey }
  | { readonly kind: 'lift'; readonly key: ApiKey }
  | { readonly kind: 'usage'; readonly key: ApiKey };

function stateOf(key: ApiKey, now: number): string {
  if (key.revokedAt) return 'Revoked';
  if (key.expiresAt && Date.parse(key.expiresAt) <= now) return 'Expired';
  if (key.replacedBy) return 'Rolled: works until it expires';
  return 'Active';
}

function CreatedKey(props: { created: CreatedApiKey }) {
  return (
    <>
      <p>
        Key <strong>{props.created.name}</strong> is ready.
      </p>
      <OnceShownSecret value={props.created.key} what="key" />
    </>
  );
}

const created = (key: CreatedApiKey) => <CreatedKey created={key} />;

interface DialogProps {
  readonly session: SignedIn;
  readonly onClose: () => void;
  readonly onChanged: () => void;
}

function CreateKeyDialog(props: DialogProps) {
  const run = (form: FormData) => {
    const expires = String(form.get('expires') ?? '');
    return props.session.client.apiKeys.create({
      name: String(form.get('name') ?? ''),
      accountId: props.session.accountId!,
      scopes: SCOPES.filter((scope) => form.get(scope) === 'on'),
      ...(expires === '' ? {} : { expiresAt: new Date(`${expires}T00:00:00Z`).toISOString() }),
    });
  };
  return (
    <ActionDialog
      title="Create key"
      confirm="Create"
      run={run}
      made={created}
      onClose={props.onClose}
      onChanged={props.onChanged}
    >
      <label>
        Name
        <input name="name" required maxLength={100} />
      </label>
      <fieldset>
        <legend>Scopes</legend>
        {SCOPES.map((scope) => (
          <label key={scope} class="inline">
            <input type="checkbox" name={scope} defaultChecked={scope === 'playbook:read'} /> {scope}
          </label>
        ))}
      </fieldset>
      <label>
        Expires (optional, UTC)
        <input name="expires" type="date" />
      </label>
    </ActionDialog>
  );
}

function RollKeyDialog(props: DialogProps & { apiKey: ApiKey }) {
  const { apiKey, session, ...rest } = props;
  return (
    <ActionDialog
      title={`Roll key ${apiKey.name}`}
      confirm="Roll"
      run={(form) => session.client.apiKeys.roll(apiKey.id, { overlapSeconds: Number(form.get('overlap')) })}
      made={created}
      {...rest}
    >
      <p>
        A new key of the same name and scopes replaces this one. The old key keeps working for the overlap,
        while you deploy the new one, then expires.
      </p>
      <label>
        Overlap
        <select name="overlap" defaultValue="86400">
          {OVERLAPS.map((overlap) => (
            <option key={overlap.seconds} value={String(overlap.seconds)}>
              {overlap.label}
            </option>
          ))}
        </select>
      </label>
    </ActionDialog>
  );
}

function RevokeKeyDialog(props: DialogProps & { apiKey: ApiKey }) {
  const { apiKey, session, ...rest } = props;
  return (
    <ActionDialog
      title={`Revoke key ${apiKey.name}`}
      confirm="Revoke"
      danger
      run={() => session.client.apiKeys.revoke(apiKey.id)}
      {...rest}
    >
      <p>
        Every request made with this key is refused within a second, on every instance. This cannot be undone.
      </p>
    </ActionDialog>
  );
}

/**
 * D33's Keys page: the account's keys with their restrictions, and creating, rolling, restricting and
 * revoking them, and each key's usage (D32).
 */
export function KeysPage(props: { session: SignedIn }) {
  const { session } = props;
  const [page, setPage] = useState(1);
  const [action, setAction] = useState<Action>();
  const accountId = session.accountId;
  const { loaded, reload } = useAccountLoad(
    session,
    (accountId) => session.client.apiKeys.list({ accountId, page, pageSize: 20 }),
    [page],
  );
  const close = useCallback(() => setAction(undefined), []);
  const now = Date.now();
  return (
    <>
      <PageHeader
        title="API keys"
        {...(accountId === undefined
          ? {}
          : { action: { label: 'Create key', run: () => setAction({ kind: 'create' }) } })}
      />
      {accountId === undefined ? (
        <NoAccount />
      ) : (
        <PagedTable
          loaded={loaded}
          what="keys"
          empty="This account has no keys yet. Create one to read or publish with it."
          caption={`Keys of account ${accountId}`}
          columns={[
            'Name',
            'Prefix',
            'Scopes',
            'Restrictions',
            'Created',
            'Last used',
            'Expires',
            'State',
            'Actions',
          ]}
          onPage={setPage}
          row={(key) => {
            const state = stateOf(key, now);
            return {
              key: key.id,
              name: key.name,
              cells: (
                <>
                  <td>
                    <code class="prefix">{`svc_sk_${key.environment}_${key.id}`}</code>
                  </td>
                  <td>{key.scopes.join(', ')}</td>
                  <td>
                    <KeyRestrictions
                      apiKey={key}
                      // Only an active key that has not been rolled can change (D32: 409 otherwise).
                      {...(state === 'Active'
                        ? {
                            onEdit: () => setAction({ kind: 'restrict', key }),
                            onLift: () => setAction({ kind: 'lift', key }),
                          }
                        : {})}
                    />
                  </td>
                  <td>{when(key.createdAt)}</td>
                  <td>{when(key.lastUsedAt)}</td>
                  <td>{when(key.expiresAt)}</td>
                  <td>{state}</td>
                  <td class="row-actions">
                    <button type="button" onClick={() => setAction({ kind: 'usage', key })}>
                      Usage
                    </button>
                    {state === 'Active' && (
                      <button type="button" onClick={() => setAction({ kind: 'roll', key })}>
                        Roll
                      </button>
                    )}
                    {!key.revokedAt && (
                      <button type="button" onClick={() => setAction({ kind: 'revoke', key })}>
                        Revoke
                      </button>
                    )}
                  </td>
                </>
              ),
            };
          }}
        />
      )}
      {action?.kind === 'create' && <CreateKeyDialog session={session} onClose={close} onChanged={reload} />}
      {action?.kind === 'roll' && (
        <RollKeyDialog session={session} apiKey={action.key} onClose={close} onChanged={reload} />
      )}
      {action?.kind === 'restrict' && (
        <EditRestrictionsDialog session={session} apiKey={action.key} onClose={close} onChanged={reload} />
      )}
      {action?.kind === 'lift' && (
        <LiftRestrictionsDialog session={session} apiKey={action.key} onClose={close} onChanged={reload} />
      )}
      {action?.kind === 'usage' && <KeyUsageDialog session={session} apiKey={action.key} onClose={close} />}
      {action?.kind === 'revoke' && (
        <RevokeKeyDialog session={session} apiKey={action.key} onClose={close} onChanged={reload} />
      )}
    </>
  );
}
