import type { Context, Span, Tracer } from '@opentelemetry/api';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { redactUrl } from '../foundation/redact-url.js';

/**
 * Traces through OpenTelemetry (D25), on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its traces-only
 * variant) is set: a span per request named by its operation id, continuing the caller's trace from
 * `traceparent`, and a child span per database statement and content-store call. Exported over OTLP
 * as the standard `OTEL_*` variables say (protocol, headers, service name).
 *
 * Off, nothing of OpenTelemetry is loaded and each instrumented call costs one check of a variable.
 */
export interface Tracing {
  readonly tracer: Tracer;
  /** Runs `work` in a child span of the current one, named `name`. */
  span<T>(name: string, attributes: Record<string, string>, work: () => Promise<T>): Promise<T>;
  /** Records a finished child span of the current one, from its duration (a statement's, for example). */
  record(name: string, attributes: Record<string, string>, durationMs: number, ok: boolean): void;
  /** Sends every span ended so far. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** Starts tracing when the environment asks for it; returns it, or undefined when it stays off. */
export async function startTracing(
  env: Readonly<Record<string, string | undefined>>,
): Promise<Tracing | undefined> {
  if (!env.OTEL_EXPORTER_OTLP_ENDPOINT && !env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return undefined;
  if (env.OTEL_SDK_DISABLED === 'true' || env.OTEL_TRACES_EXPORTER === 'none') return undefined;
  const api = await import('@opentelemetry/api');
  const { NodeTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-node');
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
  const { resourceFromAttributes } = await import('@opentelemetry/resources');
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME ?? 'playbook' }),
    // The exporter reads the OTEL_EXPORTER_OTLP_* variables itself.
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  // Registers the provider, AsyncLocalStorage context and the W3C trace-context propagator.
  provider.register();
  const tracer = api.trace.getTracer('playbook');
  const started: Tracing = {
    tracer,
    span: (name, attributes, work) =>
      tracer.startActiveSpan(name, { attributes }, async (span) => {
        try {
          return await work();
        } catch (error) {
          span.setStatus({ code: api.SpanStatusCode.ERROR, message: (error as Error).name });
          throw error;
        } finally {
          span.end();
        }
      }),
    record: (name, attributes, durationMs, ok) => {
      const end = Date.now();
      const span = tracer.startSpan(name, { attributes, startTime: end - durationMs });
      if (!ok) span.setStatus({ code: api.SpanStatusCode.ERROR });
      span.end(end);
    },
    flush: () => provider.forceFlush(),
    close: () => provider.shutdown(),
  };
  return started;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's span, while tracing is on. */
    span: Span | null;
  }
}

/**
 * A span per request: opened when the request arrives (a child of the caller's `traceparent`), made
 * the current context for everything the request does, and ended with the answer, named by the
 * operation id and carrying the method, route, path, query and status.
 */
export async function traceRequests(app: FastifyInstance, traced: Tracing): Promise<void> {
  const api = await import('@opentelemetry/api');
  app.decorateRequest('span', null);
  app.addHook('onRequest', (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void) => {
    const route = request.routeOptions;
    const parent: Context = api.propagation.extract(api.ROOT_CONTEXT, request.headers);
    // A span is exported to another system and kept there: the URL goes as the access line writes it,
    // with no credential in it (D21).
    const url = redactUrl(request.url);
    const query = url.indexOf('?');
    const span = traced.tracer.startSpan(
      // The name app.ts gives every route when it is added, as the access line and the metrics do.
      route.config.operation ?? 'unmatched',
      {
        kind: api.SpanKind.SERVER,
        attributes: {
          'http.request.method': request.method,
          'http.route': route.url ?? '',
          'url.path': query === -1 ? url : url.slice(0, query),
          ...(query === -1 ? {} : { 'url.query': url.slice(query + 1) }),
          'playbook.request_id': request.id,
        },
      },
      parent,
    );
    request.span = span;
    // What runs after this hook (the other hooks, the handler and what they await) sees this context.
    api.context.with(api.trace.setSpan(parent, span), done);
  });
  app.addHook('onResponse', (request, reply, done) => {
    const span = request.span;
    if (span) {
      span.setAttribute('http.response.status_code', reply.statusCode);
      if (reply.statusCode >= 500) span.setStatus({ code: api.SpanStatusCode.ERROR });
      span.end();
    }
    done();
  });
}
