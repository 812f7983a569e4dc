import { type Static, Type } from '@sinclair/typebox';
import { Slug, Uuid } from '../schemas/common.js';
import { ResourceVersionSummary } from '../schemas/playbook.js';
import { compileCheck, problemsOf, type SchemaCheck } from '../schemas/schema-check.js';
import { CommandError } from './context.js';
import { printable } from './printable.js';

/**
 * What `playbook pull` takes from the service, checked against the contract's patterns before any of it
 * becomes a path (D27): a service, or anyone between it and a client over plain HTTP, could answer
 * anything. Only the fields a pull goes by are checked here; the rest is data written into files.
 */

/** A Catalog of the sync feed: its id names the Resources that are its own. */
const PulledCatalog = Type.Object({ id: Uuid });
/** A Resource of the sync feed: its slug names its files. */
const PulledResource = Type.Object({ id: Uuid, catalogId: Uuid, slug: Slug });
/** A Resource's detail: the same Resource, and a media type that picks its content file's extension. */
const PulledDetail = Type.Object({
  id: Uuid,
  slug: Slug,
  currentVersion: Type.Object({
    mediaType: ResourceVersionSummary.properties.mediaType,
    content: Type.String(),
  }),
});
export type PulledResource = Static<typeof PulledResource>;

const catalogCheck = compileCheck(PulledCatalog, false);
const resourceCheck = compileCheck(PulledResource, false);
const detailCheck = compileCheck(PulledDetail, false);

/** The longest part of a value a refusal shows: enough to recognise it, never a screenful. */
const SHOWN_CHARACTERS = 80;

/**
 * A value from the service as a refusal names it: JSON, with every character a terminal acts upon
 * escaped, cut short when long.
 *
 * @example
 * shown('../\u001b[2J'); // '"../\\u001b[2J"'
 */
export function shown(value: unknown): string {
  const text = printable(JSON.stringify(value) ?? String(value));
  return text.length > SHOWN_CHARACTERS ? `${text.slice(0, SHOWN_CHARACTERS)}…` : text;
}

/** The Catalog item of the Catalog pulled, refused unless its id is one. */
export function pulledCatalog<T>(catalog: T, ref: string): T & { readonly id: string } {
  return checked(catalogCheck, catalog, () => `the Catalog ${ref}`);
}

/** A Resource item of the Catalog pulled, refused unless its id and slug are an id and a slug. */
export function pulledResource<T>(resource: T, ref: string): T & PulledResource {
  return checked(resourceCheck, resource, () => `a Resource of ${ref} ${named(resource)}`);
}

/** A Resource's detail, refused unless it is the Resource listed, with a media type of the contract. */
export function pulledDetail<T>(detail: T, listed: PulledResource, ref: string): T {
  const what = () => `the detail of ${ref}/${listed.slug} ${named(detail)}`;
  const valid = checked(detailCheck, detail, what);
  if (valid.id !== listed.id || valid.slug !== listed.slug) {
    throw refused(`${what()}: is not the Resource listed (id ${shown(listed.id)})`);
  }
  return valid;
}

/** The refusal of what the service sent: nothing of it is written. */
export function refused(why: string): CommandError {
  return new CommandError(`pull refused: ${why}; the folder is left as it was`);
}

function checked<V, T>(check: SchemaCheck<V>, value: T, what: () => string): T & V {
  const [problem] = problemsOf(check, value);
  if (problem === undefined) return value as T & V;
  throw refused(`${what()}: ${problem.name === '' ? '' : `${problem.name}: `}${problem.message}`);
}

/** An item by its id and slug, whatever they are. */
function named(value: unknown): string {
  const item = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
  return `(id ${shown(item.id)}, slug ${shown(item.slug)})`;
}
