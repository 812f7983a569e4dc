/**
 * Writes for `npm run bench`: `node change-writer.js <baseUrl> <apiKey> <perSecond>` publishes a new
 * version of one of its account's Resources `perSecond` times a second (each a change of the log),
 * each with an `x-request-id` of its own, until SIGTERM; then prints `{ answered: { requestId:
 * answeredAtMs }, failed }`. A write is answered after its commit: the answer's time stands for it.
 */
const [base, key, rate] = process.argv.slice(2);
if (!base || !key || !rate) throw new Error('usage: change-writer.js <baseUrl> <apiKey> <perSecond>');
const every = 1000 / Number(rate);

const answered: Record<string, number> = {};
let failed = 0;
let next = 0;
let inFlight = 0;
const started = Date.now();

async function write(n: number): Promise<void> {
  const requestId = `bench-${process.pid}-${n}`;
  inFlight++;
  const answer = await fetch(`${base}/v3/playbook/catalogs/org/writes/resources/doc-${n % 10}`, {
    method: 'PUT',
    headers: { 'x-api-key': key!, 'content-type': 'application/json', 'x-request-id': requestId },
    body: JSON.stringify({
      kind: 'document',
      title: 'Written a hundred times a second',
      version: `${process.pid}.${n}`,
      mediaType: 'text/plain',
      content: `write ${n}`,
    }),
  }).catch(() => undefined);
  inFlight--;
  if (answer?.status === 200 || answer?.status === 201) answered[requestId] = Date.now();
  else failed++;
  await answer?.arrayBuffer().catch(() => undefined);
}

// At a steady rate, whatever the answers' times: a write is sent when it is due (at most 50 waiting).
const timer = setInterval(() => {
  const due = Math.floor((Date.now() - started) / every);
  while (next < due) {
    if (inFlight < 50) void write(next);
    else failed++;
    next++;
  }
}, 2);
process.on('SIGTERM', () => {
  clearInterval(timer);
  process.stdout.write(`${JSON.stringify({ answered, failed })}\n`);
  process.exit(0);
});
