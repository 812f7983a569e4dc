import { PlaybookError } from '@playbook/client';

/**
 * An error as the API described it (D2): the problem's title and detail, and its request id, which an
 * operator finds in the service's logs. Anything else says what can be said.
 */
export function ProblemView(props: { error: unknown }) {
  const { error } = props;
  if (error instanceof PlaybookError) {
    return (
      <div class="problem" role="alert">
        <p class="problem-title">{error.title}</p>
        <p>{error.detail}</p>
        {error.errors.length > 0 && (
          <ul>
            {error.errors.map((field) => (
              <li key={`${field.in}:${field.name}`}>
                {field.name}: {field.message}
              </li>
            ))}
          </ul>
        )}
        {error.requestId && (
          <p class="muted">
            Request id: <code>{error.requestId}</code>
          </p>
        )}
      </div>
    );
  }
  return (
    <div class="problem" role="alert">
      <p class="problem-title">Something went wrong</p>
      <p>{error instanceof Error ? error.message : String(error)}</p>
    </div>
  );
}
