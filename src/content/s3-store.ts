import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3';
import { UnavailableError } from '../foundation/errors.js';
import { ContentNotFoundError, type ContentStore } from './content-store.js';
import { sha256Hex } from './hash.js';

/** Bounds on every call, so that an unreachable store costs a request seconds, never minutes. */
export interface S3Timeouts {
  /** Establishing a connection. */
  readonly connectMs: number;
  /** One attempt, from sending the request to the end of the response. */
  readonly attemptMs: number;
  /** Attempts per call, the first included; the SDK backs off between them. */
  readonly maxAttempts: number;
  /** A read on the request path, every attempt and back-off included. */
  readonly readDeadlineMs: number;
  /** A write (imports only), every attempt and back-off included. */
  readonly writeDeadlineMs: number;
}

export const DEFAULT_S3_TIMEOUTS: S3Timeouts = {
  connectMs: 1000,
  attemptMs: 3000,
  maxAttempts: 3,
  readDeadlineMs: 5000,
  writeDeadlineMs: 60_000,
};

export interface S3ContentStoreOptions {
  readonly bucket: string;
  /** Key prefix without leading or trailing slash; may be empty. */
  readonly prefix: string;
  /** An S3-compatible endpoint (MinIO, R2, …). Such stores address buckets by path, not by host name. */
  readonly endpoint?: string;
  /**
   * Region and credentials for callers that must not depend on the environment (tests, tools). The
   * service leaves both to the SDK's default chain (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, profiles, roles).
   */
  readonly client?: Pick<S3ClientConfig, 'region' | 'credentials'>;
  readonly timeouts?: Partial<S3Timeouts>;
}

interface SdkError {
  readonly name?: string;
  readonly $metadata?: { readonly httpStatusCode?: number };
}

function statusOf(error: unknown): number | undefined {
  return (error as SdkError | undefined)?.$metadata?.httpStatusCode;
}

function isNotFound(error: unknown): boolean {
  const name = (error as SdkError | undefined)?.name;
  return name === 'NoSuchKey' || name === 'NotFound' || statusOf(error) === 404;
}

/**
 * A failure that means the store is out of reach or overloaded (no HTTP answer, a timeout, 429 or
 * 5xx) becomes an {@link UnavailableError}, answered 503. Anything else (403 from a wrong policy,
 * 400…) is a fault of the deployment and stays an internal error.
 */
function translate(error: unknown, what: string): unknown {
  if (error instanceof UnavailableError) return error;
  const status = statusOf(error);
  if (status === undefined || status === 429 || status >= 500) {
    return new UnavailableError(`object store did not answer ${what}`, { cause: error });
  }
  return error;
}

/**
 * `object-storage` content in an S3-compatible bucket, one object per content hash under
 * `<prefix>/sha256/<first two hex digits>/<hash>`. Keys never change meaning, so a write that finds
 * its key present is skipped, and concurrent writers of the same content are harmless.
 */
type S3Sdk = typeof import('@aws-sdk/client-s3');

export class S3ContentStore implements ContentStore {
  readonly backend = 'object-storage' as const;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly timeouts: S3Timeouts;
  /** The SDK and its client, loaded on first use: a deployment without S3 never loads the SDK. */
  private loaded: Promise<{ s3: S3Sdk; client: S3Client }> | undefined;
  private client: S3Client | undefined;

  constructor(private readonly options: S3ContentStoreOptions) {
    this.bucket = options.bucket;
    this.prefix = options.prefix.replace(/^\/+|\/+$/g, '');
    this.timeouts = { ...DEFAULT_S3_TIMEOUTS, ...options.timeouts };
  }

  private sdk(): Promise<{ s3: S3Sdk; client: S3Client }> {
    this.loaded ??= import('@aws-sdk/client-s3').then((s3) => {
      const { options, timeouts } = this;
      this.client = new s3.S3Client({
        ...options.client,
        ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint, forcePathStyle: true }),
        maxAttempts: timeouts.maxAttempts,
        requestHandler: {
          connectionTimeout: timeouts.connectMs,
          requestTimeout: timeouts.attemptMs,
          // Without this the SDK only warns when an attempt outlives requestTimeout.
          throwOnRequestTimeout: true,
        },
      });
      return { s3, client: this.client };
    });
    return this.loaded;
  }

  /** The object key of a hash; exposed for tests and operators, never for answers. */
  keyOf(hash: string): string {
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new Error('content keys are SHA-256 hex digests');
    const key = `sha256/${hash.slice(0, 2)}/${hash}`;
    return this.prefix === '' ? key : `${this.prefix}/${key}`;
  }

  async put(hash: string, content: string): Promise<boolean> {
    const key = this.keyOf(hash);
    // A present key is trusted forever, so nothing but the content of that hash may ever be written.
    const body = Buffer.from(content, 'utf8');
    if (sha256Hex(body) !== hash) throw new Error(`content does not match the hash ${hash}`);
    if (await this.exists(key)) return false;
    const { s3, client } = await this.sdk();
    try {
      await client.send(
        new s3.PutObjectCommand({
          Bucket: this.bucket,
          Key: key,
          Body: body,
          ContentLength: body.length,
          ContentType: 'application/octet-stream',
          // The store checks the bytes it received against the digest the key already names.
          ChecksumSHA256: Buffer.from(hash, 'hex').toString('base64'),
        }),
        { abortSignal: AbortSignal.timeout(this.timeouts.writeDeadlineMs) },
      );
    } catch (error) {
      throw translate(error, 'a write');
    }
    return true;
  }

  async delete(hash: string): Promise<void> {
    const { s3, client } = await this.sdk();
    try {
      await client.send(new s3.DeleteObjectCommand({ Bucket: this.bucket, Key: this.keyOf(hash) }), {
        abortSignal: AbortSignal.timeout(this.timeouts.writeDeadlineMs),
      });
    } catch (error) {
      throw translate(error, 'a delete');
    }
  }

  private async exists(key: string): Promise<boolean> {
    const { s3, client } = await this.sdk();
    try {
      await client.send(new s3.HeadObjectCommand({ Bucket: this.bucket, Key: key }), {
        abortSignal: AbortSignal.timeout(this.timeouts.readDeadlineMs),
      });
      return true;
    } catch (error) {
      // S3 answers 403 rather than 404 for a missing key when the policy grants no s3:ListBucket;
      // writing again is harmless, so both mean "write it".
      if (isNotFound(error) || statusOf(error) === 403) return false;
      throw translate(error, 'a lookup');
    }
  }

  async get(hash: string): Promise<string> {
    const key = this.keyOf(hash);
    const deadline = AbortSignal.timeout(this.timeouts.readDeadlineMs);
    const { s3, client } = await this.sdk();
    try {
      const answer = await client.send(new s3.GetObjectCommand({ Bucket: this.bucket, Key: key }), {
        abortSignal: deadline,
      });
      if (!answer.Body) throw new ContentNotFoundError(hash);
      return await answer.Body.transformToString('utf-8');
    } catch (error) {
      if (error instanceof ContentNotFoundError || isNotFound(error)) throw new ContentNotFoundError(hash);
      throw translate(error, 'a read');
    }
  }

  async check(): Promise<void> {
    const { s3, client } = await this.sdk();
    try {
      await client.send(new s3.HeadBucketCommand({ Bucket: this.bucket }), {
        abortSignal: AbortSignal.timeout(this.timeouts.readDeadlineMs),
      });
    } catch (error) {
      // A bucket that does not exist is the deployment's fault, said in words (D31), not an outage.
      if (isNotFound(error)) throw new Error(`the bucket "${this.bucket}" does not exist`, { cause: error });
      throw translate(error, 'a bucket check');
    }
  }

  /** Closes the client's pooled connections, if it ever opened any. */
  close(): void {
    this.client?.destroy();
  }
}
