import type { AuditEvent, AuditEventQuery } from '@playbook/client';
import { useEffect, useState } from 'preact/hooks';
import { fromLocalField, when } from '../components/format';
import { NoAccount, PageTitle } from '../components/layout';
import { useAccountLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import type { SignedIn } from '../session';

type Action = NonNullable<AuditEventQuery['action']>[number];

/** The actions the filter offers: every change type an event can have, in the order people look for them. */
const ACTIONS = [
  'api_key.created',
  'api_key.rolled',
  'api_key.revoked',
  'api_key.leak_revoked',
  'api_key.updated',
  'api_key.expiring',
  'catalog.created',
  'catalog.updated',
  'catalog.version_published',
  'catalog.archived',
  'resource.created',
  'resource.updated',
  'resource.version_published',
  'resource.archived',
  'account.created',
  'account.plan_changed',
  'webhook_endpoint.created',
  'webhook_endpoint.updated',
  'webhook_endpoint.disabled',
  'webhook_endpoint.deleted',
] as const satisfies readonly Action[];
/** Fails to compile when the API gains an action the list above lacks: the API's list is the one source. */
const everyAction: [Exclude<Action, (typeof ACTIONS)[number]>] extends [never] ? true : false = true;
void everyAction;

/** How often the log is asked for what is new while followed: as `playbook audit --follow` asks. */
const FOLLOW_POLL_MS = 2000;

interface Filter {
  readonly action?: (typeof ACTIONS)[number];
  readonly actor?: string;
  readonly from?: string;
  readonly to?: string;
}

function actorOf(event: AuditEvent): string {
  return event.actor.id === undefined ? event.actor.type : `${event.actor.type} ${event.actor.id}`;
}

/**
 * D33's audit log: the account's events, newest first, filtered by action, actor and time, and followed
 * live by asking for the first page again every two seconds.
 */
export function AuditPage(props: { session: SignedIn }) {
  const { session } = props;
  const { client } = session;
  const accountId = session.accountId;
  const [filter, setFilter] = useState<Filter>({});
  const [page, setPage] = useState(1);
  const [follow, setFollow] = useState(false);
  const { loaded, reload } = useAccountLoad(
    session,
    (accountId) =>
      client.auditEvents.list({
        accountId,
        page,
        pageSize: 20,
        ...(filter.action ? { action: [filter.action] } : {}),
        ...(filter.actor ? { actor: filter.actor } : {}),
        ...(filter.from ? { from: filter.from } : {}),
        ...(filter.to ? { to: filter.to } : {}),
      }),
    [filter, page],
  );

  useEffect(() => {
    if (!follow) return;
    const timer = setInterval(reload, FOLLOW_POLL_MS);
    return () => clearInterval(timer);
  }, [follow, reload]);

  const apply = (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    const text = (name: string) => String(form.get(name) ?? '').trim();
    const action = ACTIONS.find((known) => known === text('action'));
    const from = fromLocalField(text('from'));
    const to = fromLocalField(text('to'));
    setPage(1);
    setFilter({
      ...(action ? { action } : {}),
      ...(text('actor') ? { actor: text('actor') } : {}),
      ...(from ? { from } : {}),
      ...(to ? { to } : {}),
    });
  };

  return (
    <>
      <PageTitle>Audit log</PageTitle>
      {accountId === undefined ? (
        <NoAccount />
      ) : (
        <>
          <form class="filters" onSubmit={apply} aria-label="Filter the audit log">
            <label>
              Action
              <select name="action" defaultValue="">
                <option value="">Any action</option>
                {ACTIONS.map((action) => (
                  <option key={action} value={action}>
                    {action}
                  </option>
                ))}
              </select>
            </label>
            <label>
              Actor
              <input name="actor" placeholder="a user or a key id" maxLength={2048} />
            </label>
            <label>
              From (UTC)
              <input name="from" type="datetime-local" />
            </label>
            <label>
              To (UTC)
              <input name="to" type="datetime-local" />
            </label>
            <button type="submit">Apply filters</button>
            <button type="button" aria-pressed={follow} onClick={() => setFollow(!follow)}>
              Follow live
            </button>
          </form>
          <p class="muted" role="status">
            {follow ? 'Following: new events appear at the top as they happen.' : ''}
          </p>
          <PagedTable
            loaded={loaded}
            what="events"
            empty="No events match."
            caption={`Events of account ${accountId}, newest first`}
            columns={['Summary', 'At', 'Action', 'Actor', 'Target', 'Request id']}
            onPage={setPage}
            row={(event) => ({
              key: event.id,
              name: event.summary,
              cells: (
                <>
                  <td>{when(event.at)}</td>
                  <td>
                    <code>{event.action}</code>
                  </td>
                  <td>{actorOf(event)}</td>
                  <td>
                    <code>{event.target}</code>
                  </td>
                  <td>
                    <code>{event.requestId ?? '—'}</code>
                  </td>
                </>
              ),
            })}
          />
        </>
      )}
    </>
  );
}
