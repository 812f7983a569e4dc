/**
 * A webhook receiver for `npm run bench`: `node webhook-receiver.js <port>` answers every POST 204 at
 * once and notes when each event arrived, by the request id of the write that made it (the event's
 * `data.requestId`). On SIGTERM it prints `{ requestId: arrivedAtMs }` as JSON and exits.
 */
import http from 'node:http';

const port = Number(process.argv[2]);
const arrived: Record<string, number> = {};
let received = 0;

const server = http.createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const at = Date.now();
    received++;
    try {
      const event = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data?: { requestId?: string } };
      const id = event.data?.requestId;
      if (id !== undefined && arrived[id] === undefined) arrived[id] = at;
    } catch {
      // not an event of the bench
    }
    response.writeHead(204).end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => process.stdout.write('ready\n'));
process.on('SIGTERM', () => {
  process.stdout.write(`${JSON.stringify({ received, arrived })}\n`);
  process.exit(0);
});
