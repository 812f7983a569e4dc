/**
 * A CI job of another account, for `npm run bench`: `node publisher.js <baseUrl> <apiKey> [catalog]`
 * publishes a new version of one Resource of its own Catalog (`writes` by default) once a second until
 * it is sent SIGTERM, then waits (up to 30 s) for the writes in flight and prints
 * how many writes it made and how many failed. Each write is a change of the log under its account,
 * which must leave every other account's answers in memory (D26).
 */
const [base, key, catalog = 'writes'] = process.argv.slice(2);
if (!base || !key) throw new Error('usage: publisher.js <baseUrl> <apiKey>');

let written = 0;
let failed = 0;
let next = 0;

async function publish(): Promise<void> {
  next++;
  const answer = await fetch(`${base}/v3/playbook/catalogs/org/${catalog}/resources/doc`, {
    method: 'PUT',
    headers: { 'x-api-key': key!, 'content-type': 'application/json' },
    body: JSON.stringify({
      kind: 'document',
      title: 'Written once a second',
      version: `${process.pid}.${next}`,
      mediaType: 'text/plain',
      content: `write ${next} of process ${process.pid}`,
    }),
  }).catch(() => undefined);
  if (answer?.status === 200 || answer?.status === 201) written++;
  else failed++;
  await answer?.arrayBuffer().catch(() => undefined);
}

/** Publishes sent and not answered yet. */
const inFlight = new Set<Promise<void>>();
const timer = setInterval(() => {
  const sent = publish().finally(() => inFlight.delete(sent));
  inFlight.add(sent);
}, 1000);
process.on('SIGTERM', () => {
  clearInterval(timer);
  // A publish sent before the stop is counted when it is answered: on a loaded instance an answer can
  // take longer than a whole measured load, and a write that committed is a write the readers met.
  void Promise.race([
    Promise.allSettled(inFlight),
    new Promise((resolve) => setTimeout(resolve, 30_000)),
  ]).then(() => {
    failed += inFlight.size;
    process.stdout.write(`${JSON.stringify({ written, failed })}\n`);
    process.exit(0);
  });
});
