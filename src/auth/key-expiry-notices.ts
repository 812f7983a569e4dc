import type { FastifyBaseLogger } from 'fastify';
import type { UnitOfWork } from '../changes/unit-of-work.js';
import type { Db } from '../db/tables.js';
import { UnavailableError } from '../foundation/errors.js';

const DAY_MS = 86_400_000;

/**
 * D32: the thresholds before a key's `expiresAt` at which an `api_key.expiring` change is made,
 * nearest last.
 */
export const EXPIRY_THRESHOLDS = [
  { name: '7d', ms: 7 * DAY_MS, words: '7 days' },
  { name: '1d', ms: DAY_MS, words: '1 day' },
] as const;
type Threshold = (typeof EXPIRY_THRESHOLDS)[number];

/** The nearest threshold an expiry at `expiresAt` has crossed at `now`, if any. */
export function crossedThreshold(expiresAt: string, now: number): Threshold | undefined {
  const remaining = Date.parse(expiresAt) - now;
  return EXPIRY_THRESHOLDS.findLast((threshold) => remaining <= threshold.ms);
}

/**
 * Records the thresholds of an expiry already crossed when it is set, in the write that sets it: no
 * notice is made for them (a key made to expire in 3 days gets the 1-day notice, not the 7-day one).
 */
export async function accountCrossedThresholds(
  trx: Db,
  keyId: string,
  expiresAt: string | null,
  now: number,
): Promise<void> {
  if (expiresAt === null) return;
  const remaining = Date.parse(expiresAt) - now;
  const crossed = EXPIRY_THRESHOLDS.filter((threshold) => remaining <= threshold.ms);
  if (crossed.length === 0) return;
  await trx
    .insertInto('api_key_expiry_notices')
    .values(
      crossed.map((threshold) => ({
        key_id: keyId,
        expires_at: expiresAt,
        threshold: threshold.name,
        noticed_at: null,
      })),
    )
    .onConflict((conflict) => conflict.doNothing())
    .execute();
}

export interface KeyExpiryNoticesOptions {
  /** How often due notices are looked for. */
  readonly intervalMs?: number;
  /** Milliseconds since the epoch (tests move it). */
  readonly now?: () => number;
  readonly logger?: FastifyBaseLogger;
}

/**
 * D32: the `api_key.expiring` changes, 7 days and 1 day before a key's `expiresAt`. Every instance
 * looks for due ones once a minute; each notice is one write of the unit of work that inserts its row
 * of `api_key_expiry_notices` (key, expiry, threshold) unless it is there, and appends the change only
 * when it inserted it. Writers take turns, so one instance makes it and the others find it made: once
 * each, whatever the number of instances. A key revoked or replaced by a roll gets none; an instance
 * that was not running when a threshold was crossed makes the nearest one only (a 7-day notice a day
 * before the expiry would say the wrong thing).
 */
export class KeyExpiryNotices {
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<number> | undefined;

  constructor(
    private readonly db: Db,
    private readonly writes: UnitOfWork,
    private readonly options: KeyExpiryNoticesOptions = {},
  ) {
    this.now = options.now ?? Date.now;
  }

  /** Looks for due notices every interval from now on. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.sweep(), this.options.intervalMs ?? 60_000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Makes the notices due now; resolves with how many this instance made. Never overlaps itself. */
  sweep(): Promise<number> {
    this.running ??= this.makeDue()
      .catch((error: unknown) => {
        // An outage of the database is said once by its health (D31); the next sweep tries again.
        if (!(error instanceof UnavailableError)) {
          this.options.logger?.warn({ err: error }, 'could not make API key expiry notices; will retry');
        }
        return 0;
      })
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private async makeDue(): Promise<number> {
    const now = this.now();
    const at = new Date(now).toISOString();
    // Once a key has expired its notices are past: their rows are of no more use.
    await this.db.deleteFrom('api_key_expiry_notices').where('expires_at', '<=', at).execute();
    const candidates = await this.db
      .selectFrom('api_keys')
      .select(['id', 'account_id', 'expires_at'])
      .where('expires_at', '>', at)
      .where('expires_at', '<=', new Date(now + EXPIRY_THRESHOLDS[0].ms).toISOString())
      .where('revoked_at', 'is', null)
      .where('replaced_by', 'is', null)
      .execute();
    if (candidates.length === 0) return 0;
    const accounted = new Set(
      (
        await this.db
          .selectFrom('api_key_expiry_notices')
          .select(['key_id', 'expires_at', 'threshold'])
          .where(
            'key_id',
            'in',
            candidates.map((key) => key.id),
          )
          .execute()
      ).map((row) => `${row.key_id} ${row.expires_at} ${row.threshold}`),
    );
    let made = 0;
    for (const key of candidates) {
      const expiresAt = key.expires_at!;
      const threshold = crossedThreshold(expiresAt, now)!;
      if (accounted.has(`${key.id} ${expiresAt} ${threshold.name}`)) continue;
      if (await this.notice(key.id, key.account_id, expiresAt, threshold, at)) made++;
    }
    return made;
  }

  /** One notice, unless another instance made it or the key changed meanwhile. */
  private notice(
    keyId: string,
    accountId: string,
    expiresAt: string,
    threshold: Threshold,
    at: string,
  ): Promise<boolean> {
    return this.writes.run('key-expiry-notice', { actor: { type: 'service' }, at }, async (write) => {
      const still = await write.db
        .selectFrom('api_keys')
        .select('id')
        .where('id', '=', keyId)
        .where('expires_at', '=', expiresAt)
        .where('revoked_at', 'is', null)
        .where('replaced_by', 'is', null)
        .executeTakeFirst();
      if (!still) return false;
      const inserted = await write.db
        .insertInto('api_key_expiry_notices')
        .values({ key_id: keyId, expires_at: expiresAt, threshold: threshold.name, noticed_at: at })
        .onConflict((conflict) => conflict.doNothing())
        .executeTakeFirst();
      if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 0) return false;
      await write.append([
        {
          namespace: accountId,
          type: 'api_key.expiring',
          target: { kind: 'api_key', id: keyId },
          summary: `API key ${keyId} expires at ${expiresAt}, in ${threshold.words}`,
        },
      ]);
      return true;
    });
  }
}
