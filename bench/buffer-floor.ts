/**
 * The buffer floor of `npm run bench`: the least work a Node.js server can do to send the service's
 * own answers. Node's HTTP server alone, no framework, no logger: each captured answer's status,
 * headers and bytes, written from memory as they were captured.
 *
 * Usage: node buffer-floor.js <answers.json> <port>
 */
import fs from 'node:fs';
import http from 'node:http';
import type { FloorRoute } from './floor.js';

const [file, port] = process.argv.slice(2);
if (file === undefined || port === undefined) throw new Error('usage: buffer-floor.js <answers.json> <port>');
const routes = new Map(
  (JSON.parse(fs.readFileSync(file, 'utf8')) as FloorRoute[]).map((route) => {
    const body = Buffer.from(route.body, 'base64');
    const headers = Object.entries({ ...route.headers, 'content-length': String(body.length) }).flat();
    return [route.path, { status: route.status, headers, body }] as const;
  }),
);
http
  .createServer((request, response) => {
    const route = routes.get(request.url ?? '');
    if (route === undefined) {
      response.writeHead(request.url === '/ready' ? 200 : 404).end();
      return;
    }
    response.writeHead(route.status, route.headers);
    response.end(route.status === 304 ? undefined : route.body);
  })
  .listen(Number(port), '127.0.0.1');
