/**
 * A CI job of another account, for `npm run bench`: `node publisher.js <baseUrl> <apiKey> [catalog]`
 * publishes a new version of one Resource of its own Catalog (`writes` by default) once a second until
 * it is sent SIGTERM, then prints
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

const timer = setInterval(() => void publish(), 1000);
process.on('SIGTERM', () => {
  clearInterval(timer);
  process.stdout.write(`${JSON.stringify({ written, failed })}\n`);
  process.exit(0);
});
