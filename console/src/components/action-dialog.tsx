import type { ComponentChildren } from 'preact';
import { useAction } from './action';
import { Dialog, DialogActions } from './dialog';
import { ProblemView } from './problem';

/**
 * A dialog that asks for one action: its fields, Cancel, and the confirming button named as the action
 * (D33). Once done, the page is told (`onChanged`); what the action made (a secret shown once) takes
 * the form's place when `made` shows it, else the dialog closes. A failure shows its problem in the
 * dialog, whose fields keep what was typed.
 */
export function ActionDialog<T>(props: {
  title: string;
  confirm: string;
  danger?: boolean;
  run: (form: FormData) => Promise<T>;
  onClose: () => void;
  onChanged: () => void;
  made?: (result: T) => ComponentChildren;
  children: ComponentChildren;
}) {
  const { made, onChanged, onClose } = props;
  const { busy, error, result, submit } = useAction(props.run, () => {
    onChanged();
    if (!made) onClose();
  });
  return (
    <Dialog title={props.title} onClose={onClose}>
      {result !== undefined && made ? (
        <>
          {made(result)}
          <div class="actions">
            <button type="button" class="primary" onClick={onClose}>
              Done
            </button>
          </div>
        </>
      ) : (
        <form onSubmit={submit} class="stacked">
          {error !== undefined && <ProblemView error={error} />}
          {props.children}
          <DialogActions
            confirm={props.confirm}
            busy={busy}
            onCancel={onClose}
            {...(props.danger ? { danger: true } : {})}
          />
        </form>
      )}
    </Dialog>
  );
}
