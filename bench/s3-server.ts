/**
 * s3rver in a process of its own for `npm run bench:scale`: the bench's own thread is blocked while wrk
 * runs, and the object store must answer meanwhile. Prints `ready` once it listens.
 *
 * Usage: node s3-server.js <directory> <port>
 */
import { createRequire } from 'node:module';

interface S3rverInstance {
  run(): Promise<unknown>;
  close(): Promise<void>;
}
type S3rverConstructor = new (options: {
  address: string;
  port: number;
  directory: string;
  silent: boolean;
}) => S3rverInstance;

const [directory, port] = process.argv.slice(2);
if (!directory || !port) throw new Error('usage: s3-server.js <directory> <port>');
// s3rver is CommonJS without type declarations; the shape used here is declared above.
const S3rver = createRequire(import.meta.url)('s3rver') as S3rverConstructor;
const server = new S3rver({ address: '127.0.0.1', port: Number(port), directory, silent: true });
await server.run();
process.stdout.write('ready\n');
process.on('SIGTERM', () => {
  void server.close().finally(() => process.exit(0));
});
