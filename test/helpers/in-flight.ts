import http from 'node:http';
import { publishedResource } from './publish-bodies.js';
import { waitFor } from './wait.js';

/** Requests held in flight on a server, for the tests of a stop that must answer them (D31). */

export interface Answer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

/**
 * A dry-run publication whose body arrives in two parts: the headers and the first part now, the rest
 * when `finish()` is called. Until then the request is in flight on the server, its handler waiting
 * for the body.
 */
export function slowPublish(address: string, key: string): { finish(): void; answer: Promise<Answer> } {
  const body = Buffer.from(
    JSON.stringify({ name: 'Signals', version: '1', resources: [publishedResource('intro')] }),
  );
  const request = http.request(`${address}/v3/playbook/catalogs/org/signals?dryRun=true`, {
    method: 'PUT',
    agent: false,
    headers: { 'x-api-key': key, 'content-type': 'application/json', 'content-length': body.length },
  });
  const answer = new Promise<Answer>((resolve, reject) => {
    request.on('response', (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        text += chunk;
      });
      response.on('end', () =>
        resolve({ status: response.statusCode!, headers: response.headers, body: text }),
      );
      response.on('error', reject);
    });
    request.on('error', reject);
  });
  const half = Math.floor(body.length / 2);
  request.write(body.subarray(0, half));
  return { finish: () => request.end(body.subarray(half)), answer };
}

const ACCEPTED_KEYS =
  /^playbook_authentications_total\{kind="api_key",outcome="accepted",reason=""\} (\d+)$/m;

/** How many times the server has accepted an API key, by its metrics. */
export async function acceptedKeys(metrics: string): Promise<number> {
  return Number(ACCEPTED_KEYS.exec(await (await fetch(metrics)).text())?.[1] ?? 0);
}

/**
 * Waits until the server has accepted API keys `atLeast` times in all: a publication whose key was
 * accepted is in flight, its handler waiting for the body. A signal sent while it was still on its way
 * would find the listener closed.
 */
export async function inFlight(metrics: string, atLeast = 1): Promise<void> {
  await waitFor('the requests in flight', async () => (await acceptedKeys(metrics)) >= atLeast, 5000);
}
