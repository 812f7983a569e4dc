import { randomInt } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * The API key string of D8, `svc_sk_<environment>_<keyId>_<secret>`: the one module that knows its
 * shape. The schemas, the authenticator, the redaction of logs and the key scanner all ask it.
 *
 * - `keyId`: 16 random base62 characters; public, the storage lookup key.
 * - `secret`: 33 random base62 characters (33 × log2 62 ≈ 196 bits) followed by a 6-character base62
 *   CRC32 of everything before it. The checksum lets the service refuse a mistyped or truncated key
 *   without touching storage, and lets a secret scanner tell a real key from a look-alike.
 */

/** The deployments a key works in (D8): test keys on test deployments, live keys on live ones. */
export const ENVIRONMENTS = ['test', 'live'] as const;
export type Environment = (typeof ENVIRONMENTS)[number];

/** What every key starts with: what tells a key from any other credential, and what scanners look for. */
export const API_KEY_PREFIX = 'svc_sk_';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const KEY_ID_LENGTH = 16;
const SECRET_RANDOM_LENGTH = 33;
const CHECKSUM_LENGTH = 6;
/** D8's bounds: a key id of 12-32 characters, a secret of at least 32 (here at most 128). */
const KEY_ID = '[A-Za-z0-9]{12,32}';
const SECRET = '[A-Za-z0-9]{32,128}';
const ENVIRONMENT = `(?:${ENVIRONMENTS.join('|')})`;

/** A key id as D8 bounds it; what the service mints is 16 characters long. */
export const KEY_ID_PATTERN = `^${KEY_ID}$`;
/** The whole key string, for schemas (the creation answer's `key`): the checksum is not a pattern. */
export const API_KEY_PATTERN = `^${API_KEY_PREFIX}${ENVIRONMENT}_${KEY_ID}_${SECRET}$`;

/**
 * One anchored pattern for the whole string. The secret is at least 32 characters (D8), its last six
 * the checksum; the bounds keep the match linear and the input short.
 */
const KEY_PATTERN = new RegExp(
  `^${API_KEY_PREFIX}(${ENVIRONMENTS.join('|')})_(${KEY_ID})_([A-Za-z0-9]{26,122})([A-Za-z0-9]{${CHECKSUM_LENGTH}})$`,
);
const MAX_KEY_LENGTH = API_KEY_PREFIX.length + 5 + 32 + 1 + 128;

/** Whether a credential is meant as an API key (it may still be malformed): it has the key's prefix. */
export function looksLikeApiKey(text: string): boolean {
  return text.startsWith(API_KEY_PREFIX);
}

/** The parts of a well-formed key whose checksum holds. */
export interface ParsedApiKey {
  readonly environment: Environment;
  readonly keyId: string;
  /** The whole secret part, checksum included: what is hashed and compared. */
  readonly secret: string;
}

/** `crypto.randomInt` draws by rejection sampling, so every character is uniform (no modulo bias). */
function randomBase62(length: number): string {
  let text = '';
  for (let i = 0; i < length; i++) text += BASE62[randomInt(BASE62.length)];
  return text;
}

function base62(value: number, width: number): string {
  let text = '';
  let rest = value;
  do {
    text = BASE62[rest % 62] + text;
    rest = Math.floor(rest / 62);
  } while (rest > 0);
  return text.padStart(width, '0');
}

/** 62^6 > 2^32, so every CRC32 fits in six characters. */
function checksum(body: string): string {
  return base62(crc32(body), CHECKSUM_LENGTH);
}

/** The key string of given parts, its checksum appended. */
export function composeApiKey(environment: Environment, keyId: string, random: string): string {
  const body = `${API_KEY_PREFIX}${environment}_${keyId}_${random}`;
  return body + checksum(body);
}

/** Mints a fresh key for `environment`; the caller stores a digest of `secret` and shows `key` once. */
export function generateApiKey(environment: Environment): { key: string } & ParsedApiKey {
  const keyId = randomBase62(KEY_ID_LENGTH);
  const key = composeApiKey(environment, keyId, randomBase62(SECRET_RANDOM_LENGTH));
  const secret = key.slice(key.lastIndexOf('_') + 1);
  return { key, environment, keyId, secret };
}

/**
 * The parts of a well-formed key, its checksum not checked: enough to look its id up and compare its
 * secret's digest with one stored, which only the issued key (whose checksum holds) can match.
 */
export function apiKeyParts(text: string): ParsedApiKey | null {
  if (text.length > MAX_KEY_LENGTH) return null;
  const match = KEY_PATTERN.exec(text);
  if (!match) return null;
  const [, environment, keyId, random, sum] = match as unknown as [
    string,
    Environment,
    string,
    string,
    string,
  ];
  return { environment, keyId, secret: random + sum };
}

/**
 * Reads a presented key, or returns null when it is malformed or its checksum fails. Pure: no
 * storage, no secret-dependent timing worth protecting (the checksum is not secret).
 */
export function parseApiKey(text: string): ParsedApiKey | null {
  const parts = apiKeyParts(text);
  // The pattern ends every key with its checksum.
  const body = text.length - CHECKSUM_LENGTH;
  return parts && checksum(text.slice(0, body)) === text.slice(body) ? parts : null;
}

/** Where a key-shaped string sits in a text, and whether it is a real key (its checksum holds). */
export interface FoundKey {
  /** 1-based line and column of its first character. */
  readonly line: number;
  readonly column: number;
  /** The key id and environment of a well-formed key, which are public; never the secret. */
  readonly parsed: Pick<ParsedApiKey, 'environment' | 'keyId'> | null;
}

/** Key-shaped runs of text: the prefix, then what D8's bounds allow, not glued to other word characters. */
const KEY_SHAPED = new RegExp(
  `(?<![A-Za-z0-9_])${API_KEY_PREFIX}${ENVIRONMENT}_${KEY_ID}_${SECRET}(?![A-Za-z0-9])`,
  'g',
);

/**
 * Finds key-shaped strings in a text (D22, `playbook keys scan`), checking each checksum offline: a
 * look-alike (a placeholder, a truncated or mistyped key) is found with `parsed: null`.
 */
export function findApiKeys(text: string): FoundKey[] {
  const found: FoundKey[] = [];
  let line = 1;
  let lineStart = 0;
  let scanned = 0;
  for (const match of text.matchAll(KEY_SHAPED)) {
    for (let i = text.indexOf('\n', scanned); i !== -1 && i < match.index; i = text.indexOf('\n', i + 1)) {
      line++;
      lineStart = i + 1;
    }
    scanned = match.index;
    const parsed = parseApiKey(match[0]);
    found.push({
      line,
      column: match.index - lineStart + 1,
      parsed: parsed && { environment: parsed.environment, keyId: parsed.keyId },
    });
  }
  return found;
}
