import type { WebhookDeliveryAttempt } from '@playbook/client';
import { useEffect, useState } from 'preact/hooks';
import { NoticeView, useNotice } from '../components/action';
import { type Bar, BarChart } from '../components/bar-chart';
import { when } from '../components/format';
import { PageTitle } from '../components/layout';
import { Link } from '../components/link';
import { Show, useLoad } from '../components/load';
import { PagedTable } from '../components/paged-table';
import { paths } from '../router';
import type { SignedIn } from '../session';

/** How often, and for how long, the deliveries are asked for again after a test event or a retry. */
const WATCH_POLL_MS = 1000;
const WATCH_FOR_MS = 15_000;

/** How many hours the success-rate chart shows, up to the current one. */
const CHART_HOURS = 24;
const HOUR_MS = 3_600_000;

/** Attempts of the last day by the hour they were made in, oldest first: succeeded and failed. */
function byHour(attempts: readonly WebhookDeliveryAttempt[], now: number): Bar[] {
  const last = Math.floor(now / HOUR_MS);
  const bars = Array.from({ length: CHART_HOURS }, (_, index) => {
    const hour = new Date((last - CHART_HOURS + 1 + index) * HOUR_MS).toISOString().slice(11, 13);
    return {
      label: `${hour}:00 UTC`,
      ...(index % 6 === 0 || index === CHART_HOURS - 1 ? { axisLabel: `${hour}:00` } : {}),
      values: [0, 0],
    };
  });
  for (const attempt of attempts) {
    const slot = Math.floor(Date.parse(attempt.at) / HOUR_MS) - (last - CHART_HOURS + 1);
    const bar = bars[slot];
    const series = attempt.outcome === 'succeeded' ? 0 : 1;
    if (bar) bar.values[series] = (bar.values[series] ?? 0) + 1;
  }
  return bars;
}

function SuccessRate(props: { attempts: readonly WebhookDeliveryAttempt[] }) {
  const { attempts } = props;
  const succeeded = attempts.filter((attempt) => attempt.outcome === 'succeeded').length;
  const rate = attempts.length === 0 ? 0 : Math.round((succeeded / attempts.length) * 100);
  return (
    <BarChart
      title="Success rate"
      summary={`${rate} % of the ${attempts.length} attempts listed succeeded (${succeeded} succeeded, ${attempts.length - succeeded} failed), by hour over the last day`}
      bars={byHour(attempts, Date.now())}
      series={[
        { name: 'Succeeded', class: 'ok' },
        { name: 'Failed', class: 'failed' },
      ]}
    />
  );
}

/** One endpoint's deliveries (D33): each attempt's status and duration, a success-rate chart, retry. */
export function WebhookPage(props: { session: SignedIn; endpointId: string }) {
  const { client } = props.session;
  const { endpointId } = props;
  const [page, setPage] = useState(1);
  const endpoint = useLoad(() => client.webhookEndpoints.get(endpointId), [client, endpointId]);
  const deliveries = useLoad(
    () => client.webhookEndpoints.deliveries(endpointId, { page, pageSize: 20 }),
    [client, endpointId, page],
  );
  const found = endpoint.loaded.state === 'ready' ? endpoint.loaded.data : undefined;
  // A test event or a retry is delivered in the background: the list is asked for again every second
  // for a while, so that its attempt shows up without a Refresh.
  const [watching, setWatching] = useState(0);
  const { reload } = deliveries;
  useEffect(() => {
    if (watching === 0) return;
    const timer = setInterval(reload, WATCH_POLL_MS);
    const end = setTimeout(() => setWatching(0), WATCH_FOR_MS);
    return () => {
      clearInterval(timer);
      clearTimeout(end);
    };
  }, [watching, reload]);
  const { notice, act } = useNotice(() => {
    reload();
    setWatching((round) => round + 1);
  });
  return (
    <>
      <p class="crumbs">
        <Link href={paths.webhooks()}>Webhooks</Link>
      </p>
      <PageTitle>{found ? `Deliveries to ${found.url}` : 'Deliveries'}</PageTitle>
      <Show loaded={endpoint.loaded} what="the endpoint">
        {(detail) => (
          <dl class="facts">
            <dt>Status</dt>
            <dd>{detail.status}</dd>
            <dt>Events</dt>
            <dd>{detail.events.join(', ')}</dd>
            {detail.description && (
              <>
                <dt>Description</dt>
                <dd>{detail.description}</dd>
              </>
            )}
          </dl>
        )}
      </Show>
      <div class="toolbar">
        <button
          type="button"
          onClick={() => act(() => client.webhookEndpoints.test(endpointId), 'A test event is on its way.')}
        >
          Send test event
        </button>
        <button type="button" onClick={deliveries.reload}>
          Refresh
        </button>
      </div>
      <NoticeView notice={notice} />
      <PagedTable
        loaded={deliveries.loaded}
        what="deliveries"
        empty="Nothing has been delivered to this endpoint yet. Send a test event to try it."
        caption="Delivery attempts, newest first"
        columns={[
          'Event',
          'At',
          'Attempt',
          'Outcome',
          'Status code',
          'Duration',
          'Error',
          'Next attempt',
          'Actions',
        ]}
        onPage={setPage}
        above={(list) => <SuccessRate attempts={list.data} />}
        row={(attempt) => ({
          key: attempt.id,
          name: attempt.type,
          cells: (
            <>
              <td>{when(attempt.at)}</td>
              <td>{attempt.attempt}</td>
              <td>{attempt.outcome}</td>
              <td>{attempt.statusCode ?? '—'}</td>
              <td>{attempt.durationMs} ms</td>
              <td>{attempt.error ?? '—'}</td>
              <td>{when(attempt.nextAttemptAt)}</td>
              <td class="row-actions">
                <button
                  type="button"
                  onClick={() =>
                    act(
                      () => client.webhookEndpoints.retryDelivery(endpointId, attempt.deliveryId),
                      'The delivery is due again.',
                    )
                  }
                >
                  Retry
                </button>
              </td>
            </>
          ),
        })}
      />
    </>
  );
}
