import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { DocsSite } from '../docs/docs-site.js';
import { NotFoundError } from '../foundation/errors.js';
import { noneMatchNames } from '../http/conditional.js';

const PageName = Type.Object({ name: Type.String({ maxLength: 200 }) });

/** The pages are the same for every caller and change only with a deploy. */
const CACHE_CONTROL = 'public, max-age=300';

/**
 * The guides and problem pages of `docs/`, rendered for people beside the API reference at `/docs`
 * (D29), with no credential: `/docs/guides` and `/docs/problems` list them, `/docs/guides/<name>` and
 * `/docs/problems/<code>` are the pages. A problem document's `type` is the URL of its code's page.
 */
export function docsPagesRoutes(pages: () => Promise<DocsSite>): FastifyPluginAsyncTypebox {
  const send = async (request: FastifyRequest, reply: FastifyReply, url: string) => {
    const site = await pages();
    const page = site.pages.get(url);
    // The address is the caller's to write: the answer does not repeat it.
    if (!page) throw new NotFoundError('there is no page of the documentation at this address');
    reply
      .header('content-security-policy', site.contentSecurityPolicy)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('cache-control', CACHE_CONTROL)
      .header('etag', page.etag);
    if (noneMatchNames(request.headers['if-none-match'], page.etag)) return reply.code(304).send();
    return reply.type('text/html; charset=utf-8').send(page.html);
  };

  return async (app) => {
    const options = { schema: { hide: true } } as const;
    const named = { schema: { hide: true, params: PageName } } as const;
    app.get('/docs/guides', options, (request, reply) => send(request, reply, '/docs/guides'));
    app.get('/docs/problems', options, (request, reply) => send(request, reply, '/docs/problems'));
    app.get('/docs/guides/:name', named, (request, reply) =>
      send(request, reply, `/docs/guides/${request.params.name}`),
    );
    app.get('/docs/problems/:name', named, (request, reply) =>
      send(request, reply, `/docs/problems/${request.params.name}`),
    );
  };
}
