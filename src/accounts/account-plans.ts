import type { LRUCache } from 'lru-cache';
import { ALWAYS_TRUSTED, type Trust } from '../changes/memory-trust.js';
import type { Db } from '../db/tables.js';
import { UnavailableError } from '../foundation/errors.js';
import { growingCache } from '../foundation/growing-cache.js';
import { DEFAULT_PLAN } from './accounts.js';

/**
 * The plan of the account a token request acts for (D6, D9), kept for up to `maxAgeMs` so that
 * token requests do not read storage each time; a plan change shows within that time. During a
 * database outage a plan read before it is served from memory (D31): no plan can change meanwhile.
 */
export class AccountPlans {
  private readonly cache: LRUCache<string, { plan: string; at: number }>;

  constructor(
    private readonly db: Db,
    private readonly now: () => number = Date.now,
    private readonly maxAgeMs = 1000,
    private readonly trust: Trust = ALWAYS_TRUSTED,
  ) {
    this.cache = growingCache(10_000);
  }

  /** An account that does not exist yet has the default plan. */
  async planOf(accountId: string): Promise<string> {
    const now = this.now();
    const cached = this.cache.get(accountId);
    const fresh = cached !== undefined && now - cached.at < this.maxAgeMs;
    if (cached && (fresh ? this.trust.trusted : this.trust.outage)) return cached.plan;
    let row: { plan: string } | undefined;
    try {
      row = await this.db
        .selectFrom('accounts')
        .select('plan')
        .where('id', '=', accountId)
        .executeTakeFirst();
    } catch (error) {
      if (error instanceof UnavailableError && cached && this.trust.trusted) return cached.plan;
      throw error;
    }
    const plan = row?.plan ?? DEFAULT_PLAN;
    this.cache.set(accountId, { plan, at: now });
    return plan;
  }
}
