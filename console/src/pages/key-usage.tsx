import type { ApiKey, ApiKeyUsage } from '@playbook/client';
import { useId } from 'preact/hooks';
import { type Bar, BarChart, type Series } from '../components/bar-chart';
import { Dialog } from '../components/dialog';
import { when } from '../components/format';
import { Empty, Show, useLoad } from '../components/load';
import type { SignedIn } from '../session';

type Bucket = ApiKeyUsage['buckets'][number];

/** D32's outcomes, in the order the chart stacks them. */
const OUTCOMES = [
  { field: 'success', name: 'Success', class: 'ok' },
  { field: 'clientError', name: 'Client error', class: 'client-error' },
  { field: 'unauthorized', name: 'Unauthorized', class: 'unauthorized' },
  { field: 'rateLimited', name: 'Rate limited', class: 'rate-limited' },
  { field: 'serverError', name: 'Server error', class: 'failed' },
] as const satisfies readonly (Series & { field: keyof Bucket })[];

const total = (bucket: Bucket) => OUTCOMES.reduce((sum, outcome) => sum + bucket[outcome.field], 0);
const day = (bucket: Bucket) => bucket.start.slice(0, 10);

function bars(buckets: readonly Bucket[]): Bar[] {
  return buckets.map((bucket) => ({
    label: day(bucket),
    axisLabel: day(bucket).slice(5),
    values: OUTCOMES.map((outcome) => bucket[outcome.field]),
  }));
}

/** The chart, and the same counts as a table for those who read rather than look. */
function UsageReport(props: { usage: ApiKeyUsage }) {
  const { buckets, lastUsed } = props.usage;
  const requests = buckets.reduce((sum, bucket) => sum + total(bucket), 0);
  const succeeded = buckets.reduce((sum, bucket) => sum + bucket.success, 0);
  const ids = useId();
  return (
    <>
      <p>
        Last used:{' '}
        {lastUsed ? `${when(lastUsed.at)}${lastUsed.address ? ` from ${lastUsed.address}` : ''}` : 'never'}
      </p>
      {requests === 0 ? (
        <Empty>No requests with this key in the last {buckets.length} days.</Empty>
      ) : (
        <>
          <BarChart
            title="Requests per day"
            summary={`${requests} requests over the last ${buckets.length} days, ${succeeded} of them successful`}
            bars={bars(buckets)}
            series={OUTCOMES}
          />
          <table class="usage">
            <caption>Requests per day by outcome (UTC)</caption>
            <thead>
              <tr>
                <th scope="col">Day</th>
                {OUTCOMES.map((outcome) => (
                  <th scope="col" key={outcome.field}>
                    {outcome.name}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {buckets.map((bucket) => (
                // Each row is named by its day (D33: a row is found by its name cell).
                <tr key={bucket.start} aria-labelledby={`${ids}-${day(bucket)}`}>
                  <th scope="row" id={`${ids}-${day(bucket)}`}>
                    {day(bucket)}
                  </th>
                  {OUTCOMES.map((outcome) => (
                    <td key={outcome.field}>{bucket[outcome.field]}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </>
  );
}

/**
 * A key's usage (D32): its requests per day of the last week by outcome, and its last use. What this
 * instance has counted and not yet written is in the report already.
 */
export function KeyUsageDialog(props: { session: SignedIn; apiKey: ApiKey; onClose: () => void }) {
  const { session, apiKey, onClose } = props;
  const { loaded, reload } = useLoad(
    () => session.client.apiKeys.usage(apiKey.id),
    [session.client, apiKey.id],
  );
  return (
    <Dialog title={`Usage of key ${apiKey.name}`} onClose={onClose}>
      <Show loaded={loaded} what="usage">
        {(usage) => <UsageReport usage={usage} />}
      </Show>
      <div class="actions">
        <button type="button" onClick={reload}>
          Refresh
        </button>
        <button type="button" class="primary" onClick={onClose}>
          Close
        </button>
      </div>
    </Dialog>
  );
}
