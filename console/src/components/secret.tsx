import { useState } from 'preact/hooks';

/**
 * A secret shown this once (a new key, a webhook signing secret): in an element named "Secret", with
 * a Copy button. It lives in the component that shows it and goes with it; nothing keeps it.
 */
export function OnceShownSecret(props: { value: string; what: string }) {
  const [copied, setCopied] = useState<'copied' | 'failed' | undefined>();
  return (
    <div class="secret">
      <p>
        This is the only time the {props.what} is shown: copy it now and keep it somewhere safe. The service
        keeps no copy it can show again.
      </p>
      <div class="secret-row">
        <output aria-label="Secret" class="secret-value">
          {props.value}
        </output>
        <button
          type="button"
          onClick={() =>
            navigator.clipboard.writeText(props.value).then(
              () => setCopied('copied'),
              () => setCopied('failed'),
            )
          }
        >
          Copy
        </button>
      </div>
      <p role="status" class="muted">
        {copied === 'copied'
          ? 'Copied to the clipboard.'
          : copied === 'failed'
            ? 'Copying failed: select the text and copy it.'
            : ''}
      </p>
    </div>
  );
}
