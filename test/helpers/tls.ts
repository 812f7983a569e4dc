import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A certificate and its private key, as files and as their PEM text. */
export interface Certificate {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: Buffer;
  readonly key: Buffer;
}

/**
 * A self-signed certificate for `localhost` and 127.0.0.1, valid for a day, made by openssl in `dir`:
 * what a test's TLS server presents, and what its clients trust as their only authority (`ca`, or
 * `NODE_EXTRA_CA_CERTS` for a process of its own).
 */
export async function selfSignedCertificate(dir: string): Promise<Certificate> {
  await fs.mkdir(dir, { recursive: true });
  const certFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  await run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=localhost',
    '-addext',
    'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout',
    keyFile,
    '-out',
    certFile,
  ]);
  return { certFile, keyFile, cert: await fs.readFile(certFile), key: await fs.readFile(keyFile) };
}
