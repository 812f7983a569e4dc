import { createHash } from 'node:crypto';
import { canonicalJson } from '../content/hash.js';
import { yieldIfBusy } from '../foundation/pace.js';
import { jsonListParts } from '../foundation/sliced-json.js';
import { byText } from '../foundation/text-order.js';
import type { ResourcePin } from '../schemas/playbook.js';

/** What a published Catalog version pins of one of its Resources. */
export interface PinSource {
  readonly resourceId: string;
  readonly slug: string;
  readonly versionId: string;
  readonly version: string;
  readonly contentHash: string;
}

/**
 * The pins of a Catalog version: one per `active` Resource at its current version, in slug order, so
 * that the same Resources always give the same pins and the same `manifestHash` (D12). Each pin is made
 * as it is read: a Catalog of 100,000 Resources never holds them all as objects.
 *
 * @example
 * const pins = new CatalogPins('svc', 'handbook', [{ resourceId, slug: 'onboarding', versionId, version: '1.0.0', contentHash }]);
 * [...pins][0].resourceHumanRef; // 'svc/handbook/onboarding'
 */
export class CatalogPins implements Iterable<ResourcePin> {
  private readonly sorted: readonly PinSource[];

  constructor(
    private readonly owner: 'svc' | 'org',
    private readonly catalogSlug: string,
    sources: readonly PinSource[],
  ) {
    this.sorted = [...sources].sort(byText((source) => source.slug));
  }

  get count(): number {
    return this.sorted.length;
  }

  *[Symbol.iterator](): Iterator<ResourcePin> {
    for (const source of this.sorted) {
      yield {
        resourceId: source.resourceId,
        resourceHumanRef: `${this.owner}/${this.catalogSlug}/${source.slug}`,
        resourceVersionId: source.versionId,
        version: source.version,
        contentHash: source.contentHash,
      };
    }
  }

  /** The pins as stored: the JSON text of their array, made a slice at a time (D20). */
  async json(): Promise<string> {
    let text = '';
    for await (const slice of this.jsonSlices()) text += slice;
    return text;
  }

  /**
   * {@link json}'s text in the slices it is made in, a thousand pins each: what stores the pins of
   * 100,000 Resources holds a slice of them at a time, never the pins whole as objects or text (D30).
   */
  jsonSlices(): AsyncGenerator<string> {
    return jsonListParts(this);
  }
}

/**
 * SHA-256 of the canonical JSON of the pins (D12), hashed pin by pin: a Catalog of 100,000 Resources
 * would otherwise build its canonical text, and a sorted copy of every pin, at once. A pin's keys are
 * the contract's five, written here in sorted order, so each pin's text is `canonicalJson`'s.
 */
export async function manifestHashOf(pins: Iterable<ResourcePin>): Promise<string> {
  const hash = createHash('sha256').update('[');
  let index = 0;
  for (const pin of pins) {
    if (index++ > 0) hash.update(',');
    hash.update(
      JSON.stringify({
        contentHash: pin.contentHash,
        resourceHumanRef: pin.resourceHumanRef,
        resourceId: pin.resourceId,
        resourceVersionId: pin.resourceVersionId,
        version: pin.version,
      }),
    );
    // 100,000 pins are a tenth of a second of hashing (D20).
    await yieldIfBusy();
  }
  return hash.update(']').digest('hex');
}

/**
 * The human refs whose pins differ between two pin lists, marked `+` (added), `-` (removed) or `~`
 * (another version), for messages that explain why a Catalog needs a new version label.
 */
export function pinChanges(before: readonly ResourcePin[], after: readonly ResourcePin[]): string[] {
  const old = new Map(before.map((pin) => [pin.resourceId, pin]));
  const changes: string[] = [];
  for (const pin of after) {
    const previous = old.get(pin.resourceId);
    old.delete(pin.resourceId);
    if (!previous) changes.push(`+${pin.resourceHumanRef}`);
    else if (canonicalJson(previous) !== canonicalJson(pin)) changes.push(`~${pin.resourceHumanRef}`);
  }
  for (const pin of old.values()) changes.push(`-${pin.resourceHumanRef}`);
  return changes;
}
