import type { ApiKey, KeyRestrictions as Restrictions, UpdateApiKeyInput } from '@playbook/client';
import { ActionDialog } from '../components/action-dialog';
import type { SignedIn } from '../session';

/** The lines that describe a key's restrictions (D32), each shown as text. */
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
 * A key's restrictions as the Keys table shows them: "None" when it has none, and "Edit restrictions"
 * (and "Lift restrictions" when it has some) where the key can still be changed: an active key that
 * has not been rolled.
 */
export function KeyRestrictions(props: { apiKey: ApiKey; onEdit?: () => void; onLift?: () => void }) {
  const lines = props.apiKey.restrictions ? describe(props.apiKey.restrictions) : [];
  return (
    <div class="restrictions">
      {lines.length === 0 ? (
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
      {props.onLift && lines.length > 0 && (
        <button type="button" onClick={props.onLift}>
          Lift restrictions
        </button>
      )}
    </div>
  );
}

/** The entries of a list field: one a line, or separated by commas; none lifts the restriction. */
function entries(form: FormData, field: string): string[] | null {
  const list = String(form.get(field) ?? '')
    .split(/[\s,]+/)
    .filter((entry) => entry !== '');
  return list.length === 0 ? null : list;
}

/**
 * The rate limit as typed: both numbers, or neither (which lifts it). A half-filled or malformed one is
 * sent as typed, so that the service's 400 names the field that is wrong.
 */
function rateLimit(form: FormData): { limit: number; windowSeconds: number } | null {
  const limit = String(form.get('limit') ?? '').trim();
  const windowSeconds = String(form.get('windowSeconds') ?? '').trim();
  if (limit === '' && windowSeconds === '') return null;
  return { limit: Number(limit), windowSeconds: Number(windowSeconds) };
}

/**
 * The patch the editor sends (a JSON Merge Patch, D32): every restriction as the form has it, an
 * emptied field lifting that restriction.
 */
export function restrictionsPatch(form: FormData): UpdateApiKeyInput {
  return {
    restrictions: {
      catalogs: entries(form, 'catalogs'),
      allowedIps: entries(form, 'allowedIps'),
      rateLimit: rateLimit(form),
    },
  };
}

interface DialogProps {
  readonly session: SignedIn;
  readonly apiKey: ApiKey;
  readonly onClose: () => void;
  readonly onChanged: () => void;
}

/** D32's restrictions of one key, edited field by field; an emptied field lifts that restriction. */
export function EditRestrictionsDialog(props: DialogProps) {
  const { apiKey, session, ...rest } = props;
  const current = apiKey.restrictions;
  return (
    <ActionDialog
      title={`Edit restrictions of key ${apiKey.name}`}
      confirm="Save restrictions"
      run={(form) => session.client.apiKeys.update(apiKey.id, restrictionsPatch(form))}
      {...rest}
    >
      <p>Every instance applies a change within a second. Leave a field empty to lift that restriction.</p>
      <label>
        Catalogs (owner/slug or owner/*, one a line)
        <textarea name="catalogs" rows={3} defaultValue={current?.catalogs?.join('\n') ?? ''} />
      </label>
      <label>
        Allowed addresses (IP addresses or CIDR ranges, one a line)
        <textarea name="allowedIps" rows={3} defaultValue={current?.allowedIps?.join('\n') ?? ''} />
      </label>
      <fieldset class="rate">
        <legend>Rate limit</legend>
        <label>
          Requests
          <input
            name="limit"
            inputMode="numeric"
            defaultValue={current?.rateLimit ? String(current.rateLimit.limit) : ''}
          />
        </label>
        <label>
          Per seconds
          <input
            name="windowSeconds"
            inputMode="numeric"
            defaultValue={current?.rateLimit ? String(current.rateLimit.windowSeconds) : ''}
          />
        </label>
      </fieldset>
    </ActionDialog>
  );
}

/** Lifts every restriction of a key at once (`"restrictions": null`), after a confirmation. */
export function LiftRestrictionsDialog(props: DialogProps) {
  const { apiKey, session, ...rest } = props;
  return (
    <ActionDialog
      title={`Lift all restrictions of key ${apiKey.name}`}
      confirm="Lift all restrictions"
      danger
      run={() => session.client.apiKeys.update(apiKey.id, { restrictions: null })}
      {...rest}
    >
      <p>The key may then read every Catalog of its account, from any address, at the deployment's rate.</p>
    </ActionDialog>
  );
}
