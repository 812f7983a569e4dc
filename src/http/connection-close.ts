import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';

/** The longest a refused connection waits for its client to close its side (RFC 9112 §9.6). */
const MAX_LINGER_MS = 5_000;

/**
 * D20: a connection the service has answered and given up on is closed for good within
 * `min(requestMs, 5 s)`.
 *
 * An answer written outside Fastify ends only the service's side of the connection, so that the
 * client can still read the answer before its own side closes (the staged close of RFC 9112 §9.6).
 * Node accepts half-open sockets on an HTTP server, so a client that never closes its side would hold
 * the socket, and a file descriptor, for as long as the process lives: this timer bounds the wait.
 */
export function closeAfterAnswer(socket: Duplex, requestMs: number): void {
  if (socket.destroyed) return;
  const timer = setTimeout(() => socket.destroy(), Math.min(requestMs, MAX_LINGER_MS));
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
}

/**
 * Fastify's `clientErrorHandler`: `answer` writes the problem document (D2), then the connection is
 * closed within a bound (see {@link closeAfterAnswer}).
 *
 * Node's request-timeout check covers a connection from the moment it is accepted, not from its first
 * byte, so a connection that never sends one is timed out here too, after `requestMs` and at most one
 * check interval. That one is closed with no answer: nothing was asked. A client that opened it ahead
 * of a request (a browser's preconnect, a pool's warm socket) and sends that request as the timeout
 * fires would take an unsolicited 408 for the answer to its request; a connection closed before any
 * answer is what clients already retry on a fresh one, as after a keep-alive timeout.
 */
export function clientErrorHandler(
  answer: (error: Error & { code?: string }, socket: Duplex) => void,
  requestMs: number,
): (error: Error & { code?: string }, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT' && socket.bytesRead === 0) {
      socket.destroy();
      return;
    }
    answer(error, socket);
    closeAfterAnswer(socket, requestMs);
  };
}
