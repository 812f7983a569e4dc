import { useState } from 'preact/hooks';
import { refusedToken } from '../session';
import { ProblemView } from './problem';

/**
 * An action's dialog: its form until it is confirmed, then what it made (a new key's secret, shown
 * once), or the problem that stopped it.
 */
export function useAction<T>(run: (form: FormData) => Promise<T>, done: () => void) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const [result, setResult] = useState<T>();
  const submit = (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    run(new FormData(event.currentTarget as HTMLFormElement)).then(
      (made) => {
        setResult(made);
        setBusy(false);
        done();
      },
      (failure: unknown) => {
        setBusy(false);
        if (!refusedToken(failure)) setError(failure);
      },
    );
  };
  return { busy, error, result, submit };
}

interface Notice {
  readonly error?: unknown;
  readonly text?: string;
}

/**
 * Actions of a page that need no dialog (send a test event, retry, disable): `act` runs one and then
 * `after`; `notice` says how it went, read out by a screen reader.
 */
export function useNotice(after: () => void) {
  const [notice, setNotice] = useState<Notice>({});
  const act = (run: () => Promise<unknown>, done: string) =>
    run().then(
      () => {
        setNotice({ text: done });
        after();
      },
      (error: unknown) => {
        if (!refusedToken(error)) setNotice({ error });
      },
    );
  return { notice, act };
}

export function NoticeView(props: { notice: Notice }) {
  return (
    <>
      {props.notice.error !== undefined && <ProblemView error={props.notice.error} />}
      <p role="status" class="muted">
        {props.notice.text ?? ''}
      </p>
    </>
  );
}
