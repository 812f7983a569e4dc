import { LRUCache } from 'lru-cache';
import type { Db } from '../db/tables.js';
import { DEFAULT_PLAN } from './accounts.js';

/**
 * The plan of the account a token request acts for (D6, D9), kept for up to `maxAgeMs` so that
 * token requests do not read storage each time; a plan change shows within that time.
 */
export class AccountPlans {
  private readonly cache: LRUCache<string, { plan: string; at: number }>;

  constructor(
    private readonly db: Db,
    private readonly now: () => number = Date.now,
    private readonly maxAgeMs = 1000,
  ) {
    this.cache = new LRUCache({ max: 10_000 });
  }

  /** An account that does not exist yet has the default plan. */
  async planOf(accountId: string): Promise<string> {
    const now = this.now();
    const cached = this.cache.get(accountId);
    if (cached && now - cached.at < this.maxAgeMs) return cached.plan;
    const row = await this.db
      .selectFrom('accounts')
      .select('plan')
      .where('id', '=', accountId)
      .executeTakeFirst();
    const plan = row?.plan ?? DEFAULT_PLAN;
    this.cache.set(accountId, { plan, at: now });
    return plan;
  }
}
