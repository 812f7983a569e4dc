import type { CreatedWebhookEndpoint, CreateWebhookEndpointInput, WebhookEndpoint } from '@playbook/client';
import { useCallback, useState } from 'preact/hooks';
import { NoticeView, useNotice } from '../components/action';
import { ActionDialog } from '../components/action-dialog';
import { when } from '../components/format';
import { NoAccount, PageHeader } from '../components/layout';
import { Link } from '../components/link';
import { useAccountLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import { OnceShownSecret } from '../components/secret';
import { paths } from '../router';
import type { SignedIn } from '../session';

type Events = CreateWebhookEndpointInput['events'];

/** The events field as typed: `*`, or change types separated by commas or spaces. */
function eventsOf(text: string): Events {
  const named = text.split(/[\s,]+/).filter((name) => name !== '');
  return (named.length === 0 ? ['*'] : named) as Events;
}

/** The fields an endpoint is made and changed with. */
function fieldsOf(form: FormData) {
  return {
    url: String(form.get('url') ?? ''),
    events: eventsOf(String(form.get('events') ?? '')),
    description: String(form.get('description') ?? '').trim(),
  };
}

type Action =
  | { readonly kind: 'add' }
  | { readonly kind: 'edit'; readonly endpoint: WebhookEndpoint }
  | { readonly kind: 'delete'; readonly endpoint: WebhookEndpoint };

function EndpointFields(props: { endpoint?: WebhookEndpoint }) {
  return (
    <>
      <label>
        URL
        <input name="url" type="url" required maxLength={2048} defaultValue={props.endpoint?.url} />
      </label>
      <label>
        Events
        <input
          name="events"
          defaultValue={props.endpoint?.events.join(', ') ?? '*'}
          aria-describedby="events-help"
        />
      </label>
      <p id="events-help" class="muted">
        Change types separated by commas (resource.version_published, api_key.revoked, …), or * for every one.
      </p>
      <label>
        Description (optional)
        <input name="description" maxLength={1000} defaultValue={props.endpoint?.description} />
      </label>
    </>
  );
}

const madeEndpoint = (endpoint: CreatedWebhookEndpoint) => (
  <>
    <p>
      Endpoint <code>{endpoint.url}</code> is ready. Its receiver checks each delivery's signature with this
      secret.
    </p>
    <OnceShownSecret value={endpoint.secret} what="signing secret" />
  </>
);

/** The dialog of an action on the endpoints: add, edit or delete. */
function EndpointDialog(props: {
  session: SignedIn;
  action: Action;
  onClose: () => void;
  onChanged: () => void;
}) {
  const { session, action, onClose, onChanged } = props;
  const endpoints = session.client.webhookEndpoints;
  if (action.kind === 'add') {
    const run = (form: FormData) => {
      const { description, ...fields } = fieldsOf(form);
      return endpoints.create({
        accountId: session.accountId!,
        ...fields,
        ...(description === '' ? {} : { description }),
      });
    };
    return (
      <ActionDialog
        title="Add endpoint"
        confirm="Create"
        run={run}
        made={madeEndpoint}
        {...{ onClose, onChanged }}
      >
        <EndpointFields />
      </ActionDialog>
    );
  }
  const { endpoint } = action;
  if (action.kind === 'edit') {
    return (
      <ActionDialog
        title="Edit endpoint"
        confirm="Save"
        run={(form) => endpoints.update(endpoint.id, fieldsOf(form))}
        {...{ onClose, onChanged }}
      >
        <EndpointFields endpoint={endpoint} />
      </ActionDialog>
    );
  }
  return (
    <ActionDialog
      title="Delete endpoint"
      confirm="Delete"
      danger
      run={() => endpoints.delete(endpoint.id)}
      {...{ onClose, onChanged }}
    >
      <p>
        Nothing more is sent to <code>{endpoint.url}</code>, and its deliveries go with it. This cannot be
        undone.
      </p>
    </ActionDialog>
  );
}

/** D33's Webhooks page: the account's endpoints, and adding, editing, disabling and deleting them. */
export function WebhooksPage(props: { session: SignedIn }) {
  const { session } = props;
  const { client } = session;
  const accountId = session.accountId;
  const [page, setPage] = useState(1);
  const [action, setAction] = useState<Action>();
  const { loaded, reload } = useAccountLoad(
    session,
    (accountId) => client.webhookEndpoints.list({ accountId, page, pageSize: 20 }),
    [page],
  );
  const { notice, act } = useNotice(reload);
  const close = useCallback(() => setAction(undefined), []);
  return (
    <>
      <PageHeader
        title="Webhooks"
        {...(accountId === undefined
          ? {}
          : { action: { label: 'Add endpoint', run: () => setAction({ kind: 'add' }) } })}
      />
      <NoticeView notice={notice} />
      {accountId === undefined ? (
        <NoAccount />
      ) : (
        <PagedTable
          loaded={loaded}
          what="endpoints"
          empty="No endpoints yet. Add one to be told of this account's changes as they happen."
          caption={`Webhook endpoints of account ${accountId}`}
          columns={['URL', 'Events', 'Status', 'Created', 'Actions']}
          onPage={setPage}
          row={(endpoint) => {
            const enabled = endpoint.status === 'enabled';
            return {
              key: endpoint.id,
              name: <Link href={paths.webhook(endpoint.id)}>{endpoint.url}</Link>,
              cells: (
                <>
                  <td>{endpoint.events.join(', ')}</td>
                  <td>{endpoint.status}</td>
                  <td>{when(endpoint.createdAt)}</td>
                  <td class="row-actions">
                    <button
                      type="button"
                      onClick={() =>
                        act(
                          () => client.webhookEndpoints.test(endpoint.id),
                          `A test event is on its way to ${endpoint.url}.`,
                        )
                      }
                    >
                      Send test event
                    </button>
                    <button type="button" onClick={() => setAction({ kind: 'edit', endpoint })}>
                      Edit
                    </button>
                    <button
                      type="button"
                      onClick={() =>
                        act(
                          () =>
                            client.webhookEndpoints.update(endpoint.id, {
                              status: enabled ? 'disabled' : 'enabled',
                            }),
                          enabled ? 'Endpoint disabled.' : 'Endpoint enabled.',
                        )
                      }
                    >
                      {enabled ? 'Disable' : 'Enable'}
                    </button>
                    <button type="button" onClick={() => setAction({ kind: 'delete', endpoint })}>
                      Delete endpoint
                    </button>
                  </td>
                </>
              ),
            };
          }}
        />
      )}
      {action && <EndpointDialog session={session} action={action} onClose={close} onChanged={reload} />}
    </>
  );
}
