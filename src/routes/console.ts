import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CONSOLE_PATH, type ConsoleFile, type ConsoleSite } from '../console/console-site.js';
import { NotFoundError } from '../foundation/errors.js';
import { Answer, MIN_COMPRESSED_BYTES, negotiateEncoding } from '../http/answer.js';
import { noneMatchNames, representationTag } from '../http/conditional.js';

/** Hashed names never change content: a year, and no revalidation. */
const ASSET_CACHE = 'public, max-age=31536000, immutable';
/** The page names the assets of this deploy: revalidated on every load, so a deploy shows at once. */
const PAGE_CACHE = 'no-cache';

const AssetName = Type.Object({ name: Type.String({ maxLength: 200 }) });

interface Served {
  readonly file: ConsoleFile;
  /** Kept with its compressed forms, made once (D19). */
  readonly answer: Answer;
  readonly cacheControl: string;
  readonly policy: string;
}

/**
 * D33: the console at `/console`, its own routes under it (`/console/keys`, …) answering with the same
 * page, which then shows the route; its hashed assets under `/console/assets/`; the identity
 * provider's return at `/console/callback`. No credential: the page holds nothing of anyone's, and
 * signs in by itself. Every answer carries the console's Content-Security-Policy, is compressed as the
 * API's answers are (D19), and answers `If-None-Match`.
 */
export function consoleRoutes(site: ConsoleSite): FastifyPluginAsyncTypebox {
  const served = (file: ConsoleFile, cacheControl: string, policy: string): Served => ({
    file,
    answer: new Answer(file.body, file.tag),
    cacheControl,
    policy,
  });
  const page = served(site.page, PAGE_CACHE, site.contentSecurityPolicy);
  const callback = served(site.callback, PAGE_CACHE, site.callbackSecurityPolicy);
  const assets = new Map(
    [...site.assets].map(([name, file]) => [name, served(file, ASSET_CACHE, site.contentSecurityPolicy)]),
  );

  const send = async (request: FastifyRequest, reply: FastifyReply, what: Served): Promise<void> => {
    const { file, answer } = what;
    const encoding =
      file.body.length >= MIN_COMPRESSED_BYTES
        ? negotiateEncoding(request.headers['accept-encoding'])
        : undefined;
    const etag = representationTag(file.tag, encoding);
    reply
      .header('content-security-policy', what.policy)
      .header('x-content-type-options', 'nosniff')
      // The callback's address holds a one-time code: no other site is ever told it.
      .header('referrer-policy', 'no-referrer')
      .header('cache-control', what.cacheControl)
      .header('vary', 'accept-encoding')
      .header('etag', etag);
    if (noneMatchNames(request.headers['if-none-match'], etag)) return reply.code(304).send();
    reply.type(file.type);
    if (encoding === undefined) return reply.send(file.body);
    reply.header('content-encoding', encoding);
    return reply.send(await answer.encoded(encoding));
  };

  return async (app) => {
    const hidden = { schema: { hide: true } } as const;
    const methods: ('GET' | 'HEAD')[] = ['GET', 'HEAD'];
    app.route({ method: methods, url: CONSOLE_PATH, ...hidden, handler: (q, r) => send(q, r, page) });
    app.route({
      method: methods,
      url: `${CONSOLE_PATH}/callback`,
      ...hidden,
      handler: (q, r) => send(q, r, callback),
    });
    app.route({
      method: methods,
      url: `${CONSOLE_PATH}/assets/:name`,
      schema: { hide: true, params: AssetName },
      handler: (request, reply) => {
        const asset = assets.get(request.params.name);
        // The address is the caller's to write: the answer does not repeat it.
        if (!asset) throw new NotFoundError('the console has no such file');
        return send(request, reply, asset);
      },
    });
    // Every other address under /console is one of the page's own routes: the page shows it.
    app.route({ method: methods, url: `${CONSOLE_PATH}/*`, ...hidden, handler: (q, r) => send(q, r, page) });
  };
}
