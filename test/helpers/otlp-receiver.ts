import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A span as the OTLP/HTTP exporter sends it in JSON. */
export interface ExportedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: { key: string; value: { stringValue?: string; intValue?: string | number } }[];
}

/** An OTLP/HTTP receiver (JSON encoding) in this process: every span it is sent, and where. */
export class OtlpReceiver {
  readonly spans: ExportedSpan[] = [];
  readonly paths: string[] = [];
  private readonly server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString('utf8');
    });
    request.on('end', () => {
      this.paths.push(request.url ?? '');
      const payload = JSON.parse(body) as { resourceSpans: { scopeSpans: { spans: ExportedSpan[] }[] }[] };
      for (const resource of payload.resourceSpans) {
        for (const scope of resource.scopeSpans) this.spans.push(...scope.spans);
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
