import net from 'node:net';
import { sleep } from './wait.js';

export interface RawAnswer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
  /** Whether the server closed the connection after answering. */
  readonly closed: boolean;
}

/** Sends `text` as it is on a fresh connection and reads what comes back until the server closes or `waitMs`. */
export async function rawExchange(port: number, text: string | Buffer, waitMs = 1500): Promise<RawAnswer> {
  const socket = net.connect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  let closed = false;
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const ended = new Promise<void>((resolve) => {
    socket.once('close', () => {
      closed = true;
      resolve();
    });
  });
  socket.on('error', () => {});
  socket.write(text);
  await Promise.race([ended, sleep(waitMs)]);
  socket.destroy();
  const received = Buffer.concat(chunks).toString('utf8');
  const [head = '', ...rest] = received.split('\r\n\r\n');
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n'), closed };
}
