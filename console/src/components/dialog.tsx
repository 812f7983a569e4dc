import type { ComponentChildren } from 'preact';
import { useEffect, useId, useRef } from 'preact/hooks';

/**
 * A modal dialog (`<dialog>` shown modal: `role=dialog`, named by its heading, the rest of the page
 * inert while it is open). Focus moves into it when it opens and back to what had it when it closes;
 * Escape closes it.
 */
export function Dialog(props: { title: string; onClose: () => void; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  const titleId = useId();
  const { onClose } = props;
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    dialog.showModal();
    const first = dialog.querySelector<HTMLElement>('[autofocus], input, select, textarea, button');
    first?.focus();
    const cancel = (event: Event) => {
      event.preventDefault();
      onClose();
    };
    dialog.addEventListener('cancel', cancel);
    return () => {
      dialog.removeEventListener('cancel', cancel);
      dialog.close();
      // Back where the user was: the button that opened the dialog, when it is still there (a revoked
      // key's row has no Revoke button any more), else the page's heading.
      if (opener?.isConnected) opener.focus();
      else document.querySelector<HTMLElement>('main h1')?.focus();
    };
  }, [onClose]);
  return (
    <dialog ref={ref} aria-labelledby={titleId} class="dialog">
      <h2 id={titleId}>{props.title}</h2>
      {props.children}
    </dialog>
  );
}

/** A dialog's buttons: Cancel, and the confirming one, named as its action ("Create", "Revoke"…). */
export function DialogActions(props: {
  confirm: string;
  busy: boolean;
  onCancel: () => void;
  danger?: boolean;
}) {
  return (
    <div class="actions">
      <button type="button" onClick={props.onCancel}>
        Cancel
      </button>
      <button type="submit" class={props.danger ? 'danger' : 'primary'} disabled={props.busy}>
        {props.confirm}
      </button>
    </div>
  );
}
