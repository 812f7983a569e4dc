import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';
import { ForbiddenError } from '../foundation/errors.js';
import { jsonTextParts } from '../foundation/sliced-json.js';
import { SlicedBody } from '../http/sliced-body.js';
import type { PublishService, WriteAnswer, WriteContext } from '../publish/publish-service.js';
import { ENTITY_TAGS_PATTERN, problemResponses, Slug, Uuid } from '../schemas/common.js';
import { Catalog } from '../schemas/playbook.js';
import {
  CatalogWriteParams,
  DryRunQuery,
  PublishChanges,
  PublishReport,
  PublishVersionBody,
  PutCatalogBody,
  PutResourceBody,
  ResourceWriteParams,
} from '../schemas/publish.js';

const security: { [scheme: string]: string[] }[] = [{ apiKey: [] }, { accessToken: [] }];
/** Writes take `playbook:write`: a key with it, or a user's access token (D23). */
const WRITE = { auth: { policy: 'api-key-or-token', scope: 'playbook:write' } } as const;

const Preconditions = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      maxLength: 1000,
      pattern: ENTITY_TAGS_PATTERN,
      description:
        "the ETag this write is based on: one a read of the object answered (in any content encoding), or a write's; 412 when the object changed since (a weak ETag never matches)",
    }),
  ),
  'if-none-match': Type.Optional(
    Type.String({
      maxLength: 1000,
      pattern: ENTITY_TAGS_PATTERN,
      description: '`*`: create only, 412 when it exists; ETags: 412 when one names the object as it is',
    }),
  ),
});

const ResourceWriteAnswer = Type.Object(
  {
    catalog: Type.Ref(Catalog),
    resource: Type.Object({
      slug: Slug,
      id: Uuid,
      currentVersionId: Type.Union([Uuid, Type.Null()]),
    }),
    changes: PublishChanges,
  },
  { title: 'ResourceWriteAnswer' },
);

function contextOf(request: FastifyRequest, owner: 'svc' | 'org'): WriteContext {
  const principal = request.principal as Principal;
  if (owner === 'svc') {
    throw new ForbiddenError(
      'service Catalogs are written by operators (playbook import --owner svc); publish under org',
    );
  }
  const headers = request.headers;
  return {
    principal,
    requestId: request.id,
    ifMatch: typeof headers['if-match'] === 'string' ? headers['if-match'] : undefined,
    ifNoneMatch: typeof headers['if-none-match'] === 'string' ? headers['if-none-match'] : undefined,
  };
}

function send<T>(reply: FastifyReply, answer: WriteAnswer<T>): T {
  reply.code(answer.status).header('cache-control', 'no-store');
  if (answer.etag) reply.header('etag', answer.etag);
  return answer.body;
}

const WRITE_ERRORS = problemResponses(400, 401, 403, 404, 409, 412, 429, 500, 503);

/** A whole Catalog's body is checked in slices, its Resources one by one (D20). */
const catalogBody = new SlicedBody(PutCatalogBody, 'resources');
/** One Resource's body may be as large as a Catalog's: its check is bounded the same way. */
const resourceBody = new SlicedBody(PutResourceBody);

export interface PublishRouteOptions {
  readonly service: PublishService;
  /** The largest body a write may have (`PLAYBOOK_MAX_PUBLISH_BYTES`). */
  readonly maxBodyBytes: number;
  /** The most Resources one Catalog's body may hold (`PLAYBOOK_MAX_PUBLISH_RESOURCES`); past it, 413. */
  readonly maxResources: number;
}

/**
 * Publishing of D23: an account writes its own (`org`) Catalogs with the model of `playbook import`.
 * Every write answer carries the written object's ETag; `If-Match` and `If-None-Match: *` guard it.
 */
export function publishRoutes(options: PublishRouteOptions): FastifyPluginAsyncTypebox {
  const { service: publish, maxBodyBytes: maxPublishBytes, maxResources } = options;
  return async (app) => {
    app.put(
      '/v3/playbook/catalogs/:owner/:catalogSlug',
      {
        config: WRITE,
        bodyLimit: maxPublishBytes,
        schema: {
          operationId: 'putCatalog',
          summary: 'Publish a whole Catalog of your account, declaratively',
          description:
            'Exactly an import of one catalog folder, in one transaction: new Resource Versions, superseding, immutable labels (409 version_label_taken), Resources left out archived, a new Catalog version when the pins change. 201 when the Catalog is created, else 200; the same body twice writes nothing. dryRun=true reports and writes nothing. An API key restricted to some Catalogs writes those alone: a write of any other is 404. The body is at most PLAYBOOK_MAX_PUBLISH_BYTES and holds at most PLAYBOOK_MAX_PUBLISH_RESOURCES Resources (413 past it); a 400 lists the first 20 problems, and checking stops at the 21st.',
          tags: ['playbook'],
          security,
          params: CatalogWriteParams,
          querystring: DryRunQuery,
          headers: Preconditions,
          body: catalogBody.schema,
          response: {
            200: { ...PublishReport, description: 'Updated (or unchanged), or what a dry run would do' },
            201: { ...PublishReport, description: 'Created' },
            ...WRITE_ERRORS,
            ...problemResponses(413),
          },
        },
        preValidation: async (request) => {
          await catalogBody.check(request.body, maxResources);
        },
      },
      async (request, reply) => {
        const context = contextOf(request, request.params.owner);
        const dryRun = request.query.dryRun === true;
        const answer = await publish.putCatalog(context, request.params.catalogSlug, request.body, dryRun);
        const report = send(reply, answer);
        // The report of a large Catalog is megabytes (every line, every pin): written as it is made,
        // a slice at a time, its Catalog's pins read from storage as they are written (D20, D30).
        reply.type('application/json; charset=utf-8');
        return reply.send(Readable.from(jsonTextParts(report)) as never);
      },
    );

    app.put(
      '/v3/playbook/catalogs/:owner/:catalogSlug/resources/:resourceSlug',
      {
        config: WRITE,
        bodyLimit: maxPublishBytes,
        schema: {
          operationId: 'putResource',
          summary: 'Publish one Resource of an existing Catalog of your account',
          description:
            'Creates or updates the Resource as an import would (a new Resource Version for new content, under a new label); publishes no Catalog version: POST …/versions does.',
          tags: ['playbook'],
          security,
          params: ResourceWriteParams,
          headers: Preconditions,
          body: resourceBody.schema,
          response: {
            200: { ...ResourceWriteAnswer, description: 'Updated, or unchanged' },
            201: { ...ResourceWriteAnswer, description: 'Created' },
            ...WRITE_ERRORS,
          },
        },
        preValidation: async (request) => {
          await resourceBody.check(request.body);
        },
      },
      async (request, reply) => {
        const { owner, catalogSlug, resourceSlug } = request.params;
        const context = contextOf(request, owner);
        return send(reply, await publish.putResource(context, catalogSlug, resourceSlug, request.body));
      },
    );

    app.post(
      '/v3/playbook/catalogs/:owner/:catalogSlug/versions',
      {
        config: WRITE,
        schema: {
          operationId: 'publishCatalogVersion',
          summary: "Publish a Catalog version pinning the active Resources' current versions",
          description:
            'The same label over the same pins replays (200); a label already naming other pins is 409 version_label_taken.',
          tags: ['playbook'],
          security,
          params: CatalogWriteParams,
          headers: Preconditions,
          body: PublishVersionBody,
          response: {
            200: { ...Type.Ref(Catalog), description: 'Already published: the Catalog as it is' },
            201: { ...Type.Ref(Catalog), description: 'Published: the Catalog with its new current version' },
            ...WRITE_ERRORS,
          },
        },
      },
      async (request, reply) => {
        const context = contextOf(request, request.params.owner);
        return send(
          reply,
          await publish.publishVersion(context, request.params.catalogSlug, request.body.version),
        );
      },
    );

    app.delete(
      '/v3/playbook/catalogs/:owner/:catalogSlug',
      {
        config: WRITE,
        schema: {
          operationId: 'archiveCatalog',
          summary: 'Archive a Catalog of your account; idempotent',
          description:
            'The Catalog keeps its Resources and versions; it leaves the lists of its readers. A Catalog that does not exist is 404.',
          tags: ['playbook'],
          security,
          params: CatalogWriteParams,
          headers: Preconditions,
          response: {
            204: Type.Null({ description: 'Archived (or already archived)' }),
            ...problemResponses(400, 401, 403, 404, 412, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        await publish.archiveCatalog(contextOf(request, request.params.owner), request.params.catalogSlug);
        return reply.code(204).send(null);
      },
    );

    app.delete(
      '/v3/playbook/catalogs/:owner/:catalogSlug/resources/:resourceSlug',
      {
        config: WRITE,
        schema: {
          operationId: 'archiveResource',
          summary: 'Archive a Resource of your account; idempotent',
          description: 'Publishes no Catalog version: the pins change with the next POST …/versions.',
          tags: ['playbook'],
          security,
          params: ResourceWriteParams,
          headers: Preconditions,
          response: {
            204: Type.Null({ description: 'Archived (or already archived)' }),
            ...problemResponses(400, 401, 403, 404, 412, 429, 500, 503),
          },
        },
      },
      async (request, reply) => {
        const { owner, catalogSlug, resourceSlug } = request.params;
        await publish.archiveResource(contextOf(request, owner), catalogSlug, resourceSlug);
        return reply.code(204).send(null);
      },
    );
  };
}
