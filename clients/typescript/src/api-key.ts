/**
 * Offline checks of an API key string, `svc_sk_<environment>_<keyId>_<secret>`: its shape, and the
 * CRC32 checksum its last six characters carry, so that a mistyped, truncated or made-up key is caught
 * before any request.
 */

export type Environment = 'test' | 'live';

export interface ParsedApiKey {
  readonly environment: Environment;
  /** The public part of the key, as the key list names it. */
  readonly keyId: string;
  /** Whether the checksum holds: false for a mistyped or truncated key. */
  readonly checksumValid: boolean;
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const SHAPE = /^svc_sk_(test|live)_([A-Za-z0-9]{12,32})_([A-Za-z0-9]{32,128})$/;
const CHECKSUM_LENGTH = 6;

let crcTable: Uint32Array | undefined;

/** CRC-32 (IEEE 802.3) of ASCII text; a key string is ASCII. */
function crc32(text: string): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (let i = 0; i < text.length; i++) crc = crcTable[(crc ^ text.charCodeAt(i)) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
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

/**
 * Reads a key string offline: `null` when it is not shaped like a Playbook key at all, else its
 * environment, key id, and whether its checksum holds. Never sends or logs anything.
 *
 * @example
 * const parsed = parseApiKey(process.env.PLAYBOOK_API_KEY ?? '');
 * if (!parsed?.checksumValid) throw new Error('PLAYBOOK_API_KEY is not a valid key');
 */
export function parseApiKey(text: string): ParsedApiKey | null {
  const match = SHAPE.exec(text.trim());
  if (!match) return null;
  const [whole, environment, keyId] = match as unknown as [string, Environment, string];
  const body = whole.slice(0, whole.length - CHECKSUM_LENGTH);
  const checksumValid = base62(crc32(body), CHECKSUM_LENGTH) === whole.slice(-CHECKSUM_LENGTH);
  return { environment, keyId, checksumValid };
}
