import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { InputError, type InputProblem } from '../foundation/errors.js';
import { byText } from '../foundation/text-order.js';
import { ADDRESS_RANGE_RULE } from '../schemas/common.js';
import type { KeyRateLimit, KeyRestrictions, KeyRestrictionsInput } from '../schemas/identity.js';

/**
 * A key's restrictions (D32): the wire form checked and written canonically, stored as that text,
 * and compiled once per key read into what a request is checked against.
 */

/** The deployment's own limit (D10), which a key's may not exceed in count nor in rate. */
export interface DeploymentRate {
  readonly max: number;
  readonly windowMs: number;
}

/** Which Catalogs of one owner a key admits: every one (`*`), or those slugs (none when empty). */
export type SlugGrant = '*' | ReadonlySet<string>;

/** What a key's `catalogs` admit, by owner: `svc` for the service's, `org` for its own account's. */
export interface CatalogGrant {
  readonly svc: SlugGrant;
  readonly org: SlugGrant;
}

/** The client addresses a key is taken from. */
export interface AddressCheck {
  allows(address: string): boolean;
}

/** A key's restrictions as a request is checked against them; a key with none has `null` instead. */
export interface Restrictions {
  readonly catalogs: CatalogGrant | null;
  readonly allowedIps: AddressCheck | null;
  readonly rateLimit: { readonly limit: number; readonly windowMs: number } | null;
  /**
   * Names the canonical set: answers kept per restriction set and sync positions are keyed by it, so
   * that a change of the set is a change of view (D27).
   */
  readonly digest: string;
}

/** The canonical form of a key's restrictions, or null when they restrict nothing. */
export function canonicalRestrictions(
  input: KeyRestrictionsInput | null | undefined,
  deployment: DeploymentRate,
): KeyRestrictions | null {
  return mergeRestrictions(null, input, deployment);
}

/**
 * A JSON Merge Patch (RFC 7396) of `current`: a field the patch leaves out is unchanged, `null`
 * lifts it, and a patch of `null` lifts every one. Only the fields the patch gives are checked (a
 * deployment's limit lowered since a key's rate was set does not refuse a change of its addresses),
 * each problem named by its field under `restrictions`. Null when nothing is left to restrict.
 */
export function mergeRestrictions(
  current: KeyRestrictions | null,
  patch: KeyRestrictionsInput | null | undefined,
  deployment: DeploymentRate,
): KeyRestrictions | null {
  if (patch === undefined) return current;
  if (patch === null) return null;
  const problems: InputProblem[] = [];
  const merged: KeyRestrictions = {
    catalogs: patch.catalogs === undefined ? (current?.catalogs ?? null) : canonicalCatalogs(patch.catalogs),
    allowedIps:
      patch.allowedIps === undefined
        ? (current?.allowedIps ?? null)
        : canonicalAddresses(patch.allowedIps, problems),
    rateLimit:
      patch.rateLimit === undefined
        ? (current?.rateLimit ?? null)
        : checkedRate(patch.rateLimit, deployment, problems),
  };
  if (problems.length > 0) throw new InputError(problems);
  return merged.catalogs === null && merged.allowedIps === null && merged.rateLimit === null ? null : merged;
}

/** Distinct, in text order, without the entries an owner's `*` already admits. */
function canonicalCatalogs(entries: readonly string[] | null): string[] | null {
  if (entries === null) return null;
  const every = new Set(entries.filter((entry) => entry.endsWith('/*')).map((entry) => entry.split('/')[0]));
  const kept = new Set(entries.filter((entry) => entry.endsWith('/*') || !every.has(entry.split('/')[0])));
  return [...kept].sort(byText((entry) => entry));
}

function canonicalAddresses(entries: readonly string[] | null, problems: InputProblem[]): string[] | null {
  if (entries === null) return null;
  const kept = new Set<string>();
  entries.forEach((entry, index) => {
    const canonical = canonicalAddress(entry);
    if (canonical === undefined) {
      problems.push({ in: 'body', name: `restrictions.allowedIps[${index}]`, message: ADDRESS_RANGE_RULE });
    } else {
      kept.add(canonical);
    }
  });
  return [...kept].sort(byText((entry) => entry));
}

const PREFIX = /^(?:0|[1-9]\d{0,2})$/;

/**
 * An address or range as ipaddr.js writes it, a range at its network address, an IPv4-mapped IPv6
 * one as the IPv4 one it maps (a client address of that form is matched as IPv4); undefined when it
 * is neither. Only the forms people write are taken: four decimal parts for IPv4 (no `10.1` or octal
 * `010.0.0.1`, which ipaddr.js would read as other addresses), no IPv6 zone.
 */
export function canonicalAddress(entry: string): string | undefined {
  const slash = entry.indexOf('/');
  const text = slash < 0 ? entry : entry.slice(0, slash);
  const family = isIP(text);
  if (family === 4 && !ipaddr.IPv4.isValidFourPartDecimal(text)) return undefined;
  if (family === 0 || text.includes('%')) return undefined;
  let bits = family === 4 ? 32 : 128;
  let prefix = bits;
  if (slash >= 0) {
    const given = entry.slice(slash + 1);
    if (!PREFIX.test(given) || Number(given) > bits) return undefined;
    prefix = Number(given);
  }
  let address: ipaddr.IPv4 | ipaddr.IPv6 = ipaddr.parse(text);
  if (address instanceof ipaddr.IPv6 && address.isIPv4MappedAddress() && prefix >= 96) {
    address = address.toIPv4Address();
    prefix -= 96;
    bits = 32;
  }
  const network =
    address instanceof ipaddr.IPv4
      ? ipaddr.IPv4.networkAddressFromCIDR(`${address.toString()}/${prefix}`)
      : ipaddr.IPv6.networkAddressFromCIDR(`${address.toString()}/${prefix}`);
  return prefix === bits ? network.toString() : `${network.toString()}/${prefix}`;
}

/** A key's rate, refused when it allows more than the deployment's: a larger count, or a higher rate. */
function checkedRate(
  rate: KeyRateLimit | null,
  deployment: DeploymentRate,
  problems: InputProblem[],
): KeyRateLimit | null {
  if (rate === null) return null;
  const windowS = deployment.windowMs / 1000;
  if (rate.limit > deployment.max) {
    problems.push({
      in: 'body',
      name: 'restrictions.rateLimit.limit',
      message: `must be at most the deployment's limit, ${deployment.max} requests`,
    });
  } else if (rate.limit * deployment.windowMs > deployment.max * rate.windowSeconds * 1000) {
    problems.push({
      in: 'body',
      name: 'restrictions.rateLimit',
      message: `must be no faster than the deployment's limit, ${deployment.max} requests per ${windowS} s`,
    });
  }
  return { limit: rate.limit, windowSeconds: rate.windowSeconds };
}

/** The column's text of canonical restrictions; null for none. */
export function storedRestrictions(restrictions: KeyRestrictions | null): string | null {
  return restrictions === null ? null : JSON.stringify(restrictions);
}

/** Restrictions as stored (canonical, written by `storedRestrictions`). */
export function readRestrictions(stored: string | null): KeyRestrictions | null {
  return stored === null ? null : (JSON.parse(stored) as KeyRestrictions);
}

/**
 * Whether a request from the client `address` (after `PLAYBOOK_TRUST_PROXY`) is taken for a key of
 * `restrictions`: always for a key without restrictions or without `allowedIps`, at the cost of a null
 * check. A pure function of its arguments, for every road a key is checked on.
 */
export function addressAllowed(restrictions: Restrictions | null | undefined, address: string): boolean {
  return restrictions?.allowedIps?.allows(address) ?? true;
}

/** Restrictions as a request is checked against them, made once per key read from storage. */
export function compileRestrictions(restrictions: KeyRestrictions | null): Restrictions | null {
  if (restrictions === null) return null;
  const { catalogs, allowedIps, rateLimit } = restrictions;
  return {
    catalogs: catalogs === null ? null : catalogGrant(catalogs),
    allowedIps: allowedIps === null ? null : addressCheck(allowedIps),
    rateLimit:
      rateLimit === null ? null : { limit: rateLimit.limit, windowMs: rateLimit.windowSeconds * 1000 },
    digest: createHash('sha256').update(JSON.stringify(restrictions)).digest('base64url').slice(0, 22),
  };
}

function catalogGrant(entries: readonly string[]): CatalogGrant {
  const of = (owner: 'svc' | 'org'): SlugGrant => {
    const slugs = entries.filter((entry) => entry.startsWith(`${owner}/`)).map((entry) => entry.slice(4));
    return slugs.includes('*') ? '*' : new Set(slugs);
  };
  return { svc: of('svc'), org: of('org') };
}

/** Verdicts kept per key, so that a client's address is parsed once, not on each of its requests. */
const KEPT_VERDICTS = 256;

function addressCheck(entries: readonly string[]): AddressCheck {
  const v4: [ipaddr.IPv4, number][] = [];
  const v6: [ipaddr.IPv6, number][] = [];
  for (const entry of entries) {
    const [address, prefix] = entry.includes('/')
      ? ipaddr.parseCIDR(entry)
      : [ipaddr.parse(entry), entry.includes(':') ? 128 : 32];
    if (address instanceof ipaddr.IPv4) v4.push([address, prefix]);
    else v6.push([address as ipaddr.IPv6, prefix]);
  }
  const verdicts = new Map<string, boolean>();
  const judge = (text: string): boolean => {
    if (!ipaddr.isValid(text)) return false;
    // An IPv4-mapped IPv6 address (what a dual-stack socket reports) is its IPv4 address.
    const address = ipaddr.process(text);
    return address instanceof ipaddr.IPv4
      ? v4.some((range) => address.match(range))
      : v6.some((range) => (address as ipaddr.IPv6).match(range));
  };
  return {
    allows(address) {
      let verdict = verdicts.get(address);
      if (verdict === undefined) {
        verdict = judge(address);
        if (verdicts.size >= KEPT_VERDICTS) verdicts.clear();
        verdicts.set(address, verdict);
      }
      return verdict;
    },
  };
}
