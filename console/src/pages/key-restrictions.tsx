import type { ApiKey } from '@playbook/client';

/**
 * What a key's restrictions look like on the wire (D32): the Catalogs it may read, the addresses it
 * may be used from, and a rate limit of its own. Read from the key object when the service sends the
 * field; a service without least-privilege keys sends none.
 */
interface Restrictions {
  readonly catalogs?: readonly string[] | null;
  readonly allowedIps?: readonly string[] | null;
  readonly rateLimit?: { readonly limit: number; readonly windowSeconds: number } | null;
}

function restrictionsOf(key: ApiKey): Restrictions | null | undefined {
  if (!('restrictions' in key)) return undefined;
  return (key as ApiKey & { restrictions?: Restrictions | null }).restrictions ?? null;
}

/** The lines that describe a key's restrictions. */
function describe(restrictions: Restrictions): string[] {
  const lines: string[] = [];
  if (restrictions.catalogs) lines.push(`Catalogs: ${restrictions.catalogs.join(', ')}`);
  if (restrictions.allowedIps) lines.push(`Addresses: ${restrictions.allowedIps.join(', ')}`);
  if (restrictions.rateLimit) {
    lines.push(`Rate: ${restrictions.rateLimit.limit} per ${restrictions.rateLimit.windowSeconds} s`);
  }
  return lines;
}

/**
 * A key's restrictions (D32), as the Keys table shows them, apart from the rest of the page: "None"
 * when the key has none (the Keys page shows the column only when the service sends the field). The
 * "Edit restrictions" button shows only where the page can edit them (`onEdit`), which needs the
 * client's `apiKeys.update`; the editor and the usage chart (`apiKeys.usage`) go beside it.
 */
export function KeyRestrictions(props: { apiKey: ApiKey; onEdit?: () => void }) {
  const restrictions = restrictionsOf(props.apiKey);
  const lines = restrictions ? describe(restrictions) : [];
  return (
    <div class="restrictions">
      {restrictions === undefined ? (
        <span class="muted">—</span>
      ) : lines.length === 0 ? (
        <span class="muted">None</span>
      ) : (
        <ul class="plain">
          {lines.map((line) => (
            <li key={line}>{line}</li>
          ))}
        </ul>
      )}
      {props.onEdit && (
        <button type="button" onClick={props.onEdit}>
          Edit restrictions
        </button>
      )}
    </div>
  );
}
