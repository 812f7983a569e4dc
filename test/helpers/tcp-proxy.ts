import net from 'node:net';

/**
 * A TCP relay in front of a server, for one client's view of it: cut, the client's connections drop
 * and new ones are refused, as when the server stops or the network between them fails, while every
 * other client goes on reaching the server; restored, they connect again. A partition of one
 * instance, made in the test process.
 */
export interface TcpProxy {
  readonly port: number;
  /** `url` with its host and port replaced by the relay's. */
  via(url: string): string;
  cut(): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}

/** `host` is where the relay listens: 127.0.0.1 unless a test reaches the server by another address. */
export async function startTcpProxy(
  target: { host: string; port: number },
  host = '127.0.0.1',
): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve((server.address() as net.AddressInfo).port);
      });
    });
  const port = await listen(0);
  const cut = async () => {
    if (!server.listening) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of sockets) socket.destroy();
    await closed;
  };
  return {
    port,
    via: (url) => {
      const parsed = new URL(url);
      parsed.hostname = host.includes(':') ? `[${host}]` : host;
      parsed.port = String(port);
      return parsed.toString();
    },
    cut,
    restore: async () => {
      if (!server.listening) await listen(port);
    },
    close: cut,
  };
}
