import { createHash } from 'node:crypto';

/** Lowercase hex SHA-256 of the UTF-8 bytes of `text` (D12). */
export function sha256Hex(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

/** Byte count of `text` in UTF-8 (D12's `contentSizeBytes`). */
export function utf8Size(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/**
 * JSON with object keys sorted at every depth, so that equal values always hash alike. Every key is
 * data, `__proto__` included (D21): the sorted copies have no prototype, so none of their keys can set
 * one.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const sorted: Record<string, unknown> = Object.create(null);
      for (const k of Object.keys(v).sort()) sorted[k] = (v as Record<string, unknown>)[k];
      return sorted;
    }
    return v;
  });
}
