import { createCipheriv, createDecipheriv, createHmac, hkdfSync } from 'node:crypto';
import type { Principal } from '../auth/principal.js';
import type { CatalogPlace } from '../catalog/sync-reads.js';
import type { DeploymentKeys, DeploymentKeyVersion } from '../foundation/deployment-key.js';
import { SyncTokenError } from '../foundation/errors.js';
import { growingCache } from '../foundation/growing-cache.js';

/**
 * Positions in the sync feed (D27) as callers hold them: sealed, so that none can be forged, read or
 * carried into another view. A position names the view it was made for (the caller's account, or none,
 * its plan, and its key's restrictions when it has some); the feed refuses it under any other.
 *
 * A token is `base64url(version | key id | nonce | AES-256-GCM(position) | tag)`, under a key derived
 * from the deployment key for this purpose alone (`sync-token`). The nonce is an HMAC of the position
 * (a synthetic IV), so the same position always seals to the same token: a caller asking again at the
 * position it holds gets its own token back. One base64url word, no dots: nothing in a URL or a log
 * takes it for a credential (a JWS has dots).
 */

/** Whose view a position is of. */
export interface View {
  readonly accountId: string | null;
  readonly plan: string;
  /** D32: the digest of the key's restrictions; null for a caller without any. */
  readonly restrictions: string | null;
}

/** The view a caller reads the feed in. */
export function viewOf(principal: Principal): View {
  return {
    accountId: principal.accountId,
    plan: principal.plan,
    restrictions: principal.restrictions === null ? null : principal.restrictions.digest,
  };
}

/** Where an initial sync has got to: Catalogs first, then each Catalog's Resources, in list order. */
export type InitialCursor =
  | { readonly phase: 'catalogs'; readonly after?: CatalogPlace }
  | { readonly phase: 'resources'; readonly catalog: CatalogPlace; readonly afterSlug: string };

/**
 * - `sync`: everything up to `seq` of the change log has been sent (a `nextSyncToken`);
 * - `initial`: a page of an initial sync that began at the log's `seq` (a `nextPageToken`);
 * - `delta`: a page of the changes in `(from, upto]`, sent up to the entity whose last change is
 *   `after`, and, when `expansion` is set, up to a Resource slug of the Catalog that change was of
 *   (a `nextPageToken`).
 */
export type Position =
  | { readonly kind: 'sync'; readonly view: View; readonly seq: number }
  | { readonly kind: 'initial'; readonly view: View; readonly seq: number; readonly cursor: InitialCursor }
  | {
      readonly kind: 'delta';
      readonly view: View;
      readonly from: number;
      readonly upto: number;
      readonly after: number;
      readonly expansion?: { readonly catalogId: string; readonly afterSlug: string };
    };

const VERSION = 1;
const KEY_ID_BYTES = 6;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + KEY_ID_BYTES;

interface Sealing {
  readonly header: Buffer;
  readonly cipherKey: Buffer;
  readonly nonceKey: Buffer;
}

/**
 * Tokens opened lately, by their text: a follower asks again and again with the token it holds, and a
 * token that opened once opens the same way (it is sealed, and its key is held for the process's life).
 */
const OPENED_KEPT = 10_000;

export class SyncTokens {
  private readonly sealings = new Map<string, Sealing>();
  private readonly opened = growingCache<string, Position>(OPENED_KEPT);

  constructor(private readonly keys: DeploymentKeys) {}

  /** The token of `position`, sealed under the deployment's current key. */
  seal(position: Position): string {
    const sealing = this.sealing(this.keys.current);
    const plaintext = Buffer.from(JSON.stringify(encode(position)));
    const nonce = createHmac('sha256', sealing.nonceKey).update(plaintext).digest().subarray(0, NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', sealing.cipherKey, nonce);
    cipher.setAAD(sealing.header);
    const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return Buffer.concat([sealing.header, nonce, body, cipher.getAuthTag()]).toString('base64url');
  }

  /**
   * The position a token names, if this deployment sealed it and it is of the kind `parameter` takes
   * (a `nextSyncToken` as `syncToken`, a `nextPageToken` as `pageToken`); else `invalid_sync_token`.
   */
  open(token: string, parameter: 'syncToken' | 'pageToken'): Position {
    const invalid = (why: string) =>
      new SyncTokenError(
        `${parameter} ${why}; start again with an initial sync`,
        'invalid_sync_token',
        parameter,
      );
    const position = this.opened.get(token) ?? this.unseal(token, invalid);
    const expected = parameter === 'syncToken' ? 'sync' : 'page';
    if ((position.kind === 'sync' ? 'sync' : 'page') !== expected) {
      throw invalid(
        parameter === 'syncToken'
          ? 'is a nextPageToken: send it as pageToken'
          : 'is a nextSyncToken: send it as syncToken',
      );
    }
    this.opened.set(token, position);
    return position;
  }

  /** The position sealed in `token`, checked for its key, its tag and its form. */
  private unseal(token: string, invalid: (why: string) => SyncTokenError): Position {
    const bytes = Buffer.from(token, 'base64url');
    if (bytes.length < HEADER_BYTES + NONCE_BYTES + TAG_BYTES + 2 || bytes[0] !== VERSION) {
      throw invalid('is not a sync position of this service');
    }
    const key = this.keys.find(bytes.subarray(1, HEADER_BYTES).toString('base64url'));
    // A key no longer held looks like any forgery from here: the token cannot be checked.
    if (!key) throw invalid('was not made by this deployment, or under a key it no longer holds');
    const sealing = this.sealing(key);
    let plaintext: Buffer;
    try {
      const decipher = createDecipheriv(
        'aes-256-gcm',
        sealing.cipherKey,
        bytes.subarray(HEADER_BYTES, HEADER_BYTES + NONCE_BYTES),
      );
      decipher.setAAD(bytes.subarray(0, HEADER_BYTES));
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
      plaintext = Buffer.concat([
        decipher.update(bytes.subarray(HEADER_BYTES + NONCE_BYTES, bytes.length - TAG_BYTES)),
        decipher.final(),
      ]);
    } catch {
      throw invalid('was not made by this service, or has been altered');
    }
    let position: Position | undefined;
    try {
      position = decode(JSON.parse(plaintext.toString('utf8')) as unknown);
    } catch {
      position = undefined;
    }
    if (!position) throw invalid('is not a sync position of this service');
    return position;
  }

  private sealing(key: DeploymentKeyVersion): Sealing {
    let sealing = this.sealings.get(key.id);
    if (!sealing) {
      const secret = key.derive('sync-token');
      sealing = {
        header: Buffer.concat([Buffer.of(VERSION), Buffer.from(key.id, 'base64url')]),
        cipherKey: Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), 'cipher', 32)),
        nonceKey: Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), 'nonce', 32)),
      };
      this.sealings.set(key.id, sealing);
    }
    return sealing;
  }
}

// A position as a short JSON array: the kind first, then the view, then the kind's own fields, and
// last the digest of the view's restrictions when it has some.

type Encoded = (string | number | null)[];

function encode(position: Position): Encoded {
  const { restrictions } = position.view;
  const fields = encodeFields(position);
  return restrictions === null ? fields : [...fields, restrictions];
}

function encodeFields(position: Position): Encoded {
  const view = [position.view.accountId, position.view.plan];
  switch (position.kind) {
    case 'sync':
      return ['s', ...view, position.seq];
    case 'initial': {
      const { cursor } = position;
      return cursor.phase === 'catalogs'
        ? [
            'c',
            ...view,
            position.seq,
            cursor.after ? Number(cursor.after.owned) : null,
            cursor.after?.slug ?? null,
          ]
        : ['r', ...view, position.seq, Number(cursor.catalog.owned), cursor.catalog.slug, cursor.afterSlug];
    }
    case 'delta':
      return [
        'd',
        ...view,
        position.from,
        position.upto,
        position.after,
        position.expansion?.catalogId ?? null,
        position.expansion?.afterSlug ?? null,
      ];
  }
}

const isSeq = (value: unknown): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
const isText = (value: unknown): value is string => typeof value === 'string';
const isFlag = (value: unknown): value is 0 | 1 => value === 0 || value === 1;

/** The fields of each kind after its view. */
const FIELDS: Readonly<Record<string, number>> = { s: 1, c: 3, r: 4, d: 5 };

function decode(value: unknown): Position | undefined {
  if (!Array.isArray(value)) return undefined;
  const [kind, accountId, plan, ...fields] = value as unknown[];
  if ((accountId !== null && !isText(accountId)) || !isText(plan)) return undefined;
  const count = FIELDS[String(kind)];
  if (count === undefined || (fields.length !== count && fields.length !== count + 1)) return undefined;
  const restrictions = fields.length > count ? fields.pop() : null;
  if (restrictions !== null && !isText(restrictions)) return undefined;
  const rest = fields;
  const view: View = { accountId, plan, restrictions };
  if (kind === 's' && rest.length === 1 && isSeq(rest[0])) return { kind: 'sync', view, seq: rest[0] };
  if (kind === 'c' && rest.length === 3 && isSeq(rest[0])) {
    const [seq, owned, slug] = rest;
    if (owned === null && slug === null) return { kind: 'initial', view, seq, cursor: { phase: 'catalogs' } };
    if (!isFlag(owned) || !isText(slug)) return undefined;
    return { kind: 'initial', view, seq, cursor: { phase: 'catalogs', after: { owned: owned === 1, slug } } };
  }
  if (kind === 'r' && rest.length === 4 && isSeq(rest[0])) {
    const [seq, owned, slug, afterSlug] = rest;
    if (!isFlag(owned) || !isText(slug) || !isText(afterSlug)) return undefined;
    return {
      kind: 'initial',
      view,
      seq,
      cursor: { phase: 'resources', catalog: { owned: owned === 1, slug }, afterSlug },
    };
  }
  if (kind === 'd' && rest.length === 5) {
    const [from, upto, after, catalogId, afterSlug] = rest;
    if (!isSeq(from) || !isSeq(upto) || !isSeq(after)) return undefined;
    if (catalogId === null && afterSlug === null) return { kind: 'delta', view, from, upto, after };
    if (!isText(catalogId) || !isText(afterSlug)) return undefined;
    return { kind: 'delta', view, from, upto, after, expansion: { catalogId, afterSlug } };
  }
  return undefined;
}
