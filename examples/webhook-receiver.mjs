#!/usr/bin/env node
// Receives Playbook's webhook events: checks each delivery's signature, drops repeats, and prints
// every new event as one JSON line.
// Usage: PLAYBOOK_WEBHOOK_SECRET=whsec_… PORT=3000 node examples/webhook-receiver.mjs
import http from 'node:http';
import { verifyWebhook, WebhookVerificationError } from '@playbook/client';

const secret = process.env.PLAYBOOK_WEBHOOK_SECRET;
if (!secret) {
  console.error('usage: PLAYBOOK_WEBHOOK_SECRET=whsec_… [PORT=3000] node examples/webhook-receiver.mjs');
  process.exit(2);
}

// A delivery may come more than once (a retry after a lost answer): each event is handled once.
// Keep these ids in your database in production, for as long as deliveries are retried (a day).
const seen = new Set();

const server = http.createServer((request, response) => {
  const chunks = [];
  request.on('data', (chunk) => chunks.push(chunk));
  request.on('end', async () => {
    try {
      // The raw body, exactly as it came: the signature covers these bytes.
      const event = await verifyWebhook(secret, request.headers, Buffer.concat(chunks));
      if (!seen.has(event.data.id)) {
        seen.add(event.data.id);
        // Answer quickly (within 10 s); do slow work after answering, or in a queue.
        console.log(JSON.stringify({ type: event.type, target: event.data.target }));
      }
      response.writeHead(204).end();
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) throw error;
      console.error(`refused a delivery: ${error.message}`);
      response.writeHead(400).end();
    }
  });
});

server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.error(`listening on http://127.0.0.1:${server.address().port}`);
});
