import { type Static, type TSchema, Type } from '@sinclair/typebox';
import fastJson from 'fast-json-stringify';
import { PageMeta } from '../schemas/common.js';
import {
  Catalog,
  CatalogVersion,
  playbookSchemas,
  ResourceDetail,
  type ResourceDetail as ResourceDetailType,
  ResourceListItem,
  type ResourceListItem as ResourceListItemType,
} from '../schemas/playbook.js';
import { digestOf, type SerializedJson } from './serialized-rows.js';

/**
 * Serializers for answers the service assembles from cached JSON parts. Each is compiled by
 * fast-json-stringify from the same TypeBox schema the route declares, with the options Fastify's
 * own serializer compiler uses (the named schemas as external references, nothing else), so that an
 * assembled answer is byte for byte the one Fastify would have serialized from the whole object;
 * test/http/read-caches.test.ts compares the two.
 */

// fast-json-stringify declares its own JSON Schema types, which TypeBox's do not match line for line;
// both describe the same plain JSON Schema documents.
type JsonSchema = fastJson.ObjectSchema;

function compile<T extends object>(schema: TSchema): (value: T) => string {
  // Fastify leaves the compiled schema itself out of the external references; so do we.
  const external: Record<string, fastJson.Schema> = {};
  for (const named of playbookSchemas) {
    if (named.$id !== schema.$id) external[named.$id!] = named as unknown as JsonSchema;
  }
  return fastJson(schema as unknown as JsonSchema, { schema: external });
}

/** A Catalog without its `currentVersion`, which is serialized apart and cached by catalog version. */
export const CatalogHead = Type.Omit(Catalog, ['currentVersion']);
export type CatalogHead = Static<typeof CatalogHead>;
/** The "Catalog version object" of contract.md §2. */
export type CatalogVersionObject = Static<typeof CatalogVersion>;

export const serializeCatalogHead = compile<CatalogHead>(CatalogHead);
export const serializeCatalogVersion = compile<CatalogVersionObject>(CatalogVersion);
export const serializeResourceListItem = compile<ResourceListItemType>(ResourceListItem);
export const serializeResourceDetail = compile<ResourceDetailType>(ResourceDetail);
const serializePageMeta = compile<PageMeta>(PageMeta);

const CURRENT_VERSION = Buffer.from(',"currentVersion":');
const CLOSE_OBJECT = Buffer.from('}');
const COMMA = Buffer.from(',');
const DATA_OPEN = Buffer.from('{"data":[');
const DATA_CLOSE = Buffer.from('],"meta":');

/**
 * A Catalog from its head and its current version, both serialized already. `currentVersion` is the
 * last property of the Catalog schema, so the serializer would have written it last, before the `}`.
 */
export function catalogOf(head: SerializedJson, currentVersion: SerializedJson | undefined): SerializedJson {
  if (currentVersion === undefined) return head;
  const headBytes = head.chunks.length === 1 ? head.chunks[0]! : Buffer.concat(head.chunks);
  return {
    chunks: [headBytes.subarray(0, -1), CURRENT_VERSION, ...currentVersion.chunks, CLOSE_OBJECT],
    digest: digestOf(`${head.digest}\n${currentVersion.digest}`),
  };
}

/** The pagination envelope (`Page` in schemas/common.ts) around items serialized already. */
export function serializedPage(items: readonly SerializedJson[], meta: PageMeta): SerializedJson {
  const metaJson = serializePageMeta(meta);
  const chunks: Buffer[] = [DATA_OPEN];
  items.forEach((item, index) => {
    if (index > 0) chunks.push(COMMA);
    chunks.push(...item.chunks);
  });
  chunks.push(DATA_CLOSE, Buffer.from(metaJson), CLOSE_OBJECT);
  return {
    chunks,
    // The page is a function of its items and its meta: their digests stand for it, and a list of
    // catalogs half a megabyte long is not hashed again on every request.
    digest: digestOf(`${metaJson}\n${items.map((item) => item.digest).join('\n')}`),
  };
}
