import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ApiKeyLookup } from '../../src/auth/api-key-verifier.js';
import { type SecretHasher, sha256Hasher } from '../../src/auth/secret-digest.js';
import { AuthenticationError } from '../../src/foundation/errors.js';
import { composeApiKey, generateApiKey, parseApiKey } from '../../src/schemas/api-key-format.js';
import { createTestBackend, type TestBackend } from '../helpers/backend.js';
import { createTestIdentity, type TestIdentity } from '../helpers/credentials.js';

/** Counts every digest and every storage read the verifier makes. */
class Meter {
  digests = 0;
  lookups = 0;
  readonly hasher: SecretHasher = {
    digest: (secret) => {
      this.digests++;
      return sha256Hasher.digest(secret);
    },
  };
  readonly wrap = (lookup: ApiKeyLookup): ApiKeyLookup => ({
    find: (keyId) => {
      this.lookups++;
      return lookup.find(keyId);
    },
  });
  reset(): void {
    this.digests = 0;
    this.lookups = 0;
  }
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AuthenticationError);
  return (error as Error).message;
}

describe('API key verification', () => {
  let backend: TestBackend;
  let identity: TestIdentity;
  const meter = new Meter();
  let clock = Date.parse('2031-05-01T12:00:00.000Z');

  beforeAll(async () => {
    backend = await createTestBackend();
  });
  beforeEach(() => {
    identity = createTestIdentity(backend, {
      options: {
        hasher: meter.hasher,
        keyLookup: meter.wrap,
        now: () => clock,
        usageFlushIntervalMs: 60_000,
      },
    });
  });
  afterEach(async () => {
    await identity.close();
  });
  afterAll(async () => {
    await backend.cleanup();
  });

  it('refuses a malformed key or a bad checksum without hashing or reading storage', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    meter.reset();
    const typo = key.slice(0, -1) + (key.at(-1) === 'x' ? 'y' : 'x');
    expect(await refusal(identity.verifier.verify(typo))).toBe('the API key is malformed');
    expect(await refusal(identity.verifier.verify('not-a-key'))).toBe('the API key is malformed');
    expect(await refusal(identity.verifier.verify(`${key}0`))).toBe('the API key is malformed');
    expect(meter).toMatchObject({ digests: 0, lookups: 0 });
  });

  it('refuses a key of the other environment without reading storage', async () => {
    const live = generateApiKey('live');
    meter.reset();
    expect(await refusal(identity.verifier.verify(live.key))).toMatch(/accepts only test API keys/);
    expect(meter).toMatchObject({ digests: 0, lookups: 0 });
  });

  it('spends the same hashing on an unknown key id as on a wrong secret', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    const keyId = parseApiKey(key)!.keyId;
    const random = () => generateApiKey('test').secret.slice(0, 33);
    // Both well formed, checksums valid: one names no stored key, one a stored key with another secret.
    const unknownId = composeApiKey('test', 'Unknown0KeyId000', random());
    const wrongSecret = composeApiKey('test', keyId, random());

    meter.reset();
    expect(await refusal(identity.verifier.verify(unknownId))).toBe('the API key is not valid');
    const unknownCost = meter.digests;
    meter.reset();
    expect(await refusal(identity.verifier.verify(wrongSecret))).toBe('the API key is not valid');
    const wrongSecretCost = meter.digests;

    expect(unknownCost).toBe(1);
    expect(wrongSecretCost).toBe(unknownCost);
  });

  it('#11: takes as long to refuse an unknown key id as a wrong secret (medians of 3,000 each)', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    const keyId = parseApiKey(key)!.keyId;
    await identity.verifier.verify(key); // the known id is cached, as a key in use would be
    const random = () => generateApiKey('test').secret.slice(0, 33);
    const wrongSecret = composeApiKey('test', keyId, random());
    const times = { unknown: [] as number[], wrong: [] as number[] };
    const timed = async (presented: string) => {
      const started = process.hrtime.bigint();
      await identity.verifier.verify(presented).catch(() => undefined);
      return Number(process.hrtime.bigint() - started);
    };
    // Interleaved, so that a machine that slows down meanwhile slows both alike; a fresh unknown id
    // each time, as an attacker guessing ids would send.
    for (let i = 0; i < 3200; i++) {
      const unknown = composeApiKey('test', `Unknown${String(i).padStart(9, '0')}`, random());
      const [first, second] = i % 2 === 0 ? [unknown, wrongSecret] : [wrongSecret, unknown];
      const a = await timed(first);
      const b = await timed(second);
      if (i < 200) continue; // warm-up
      times.unknown.push(first === unknown ? a : b);
      times.wrong.push(first === unknown ? b : a);
    }
    const median = (values: number[]) => [...values].sort((x, y) => x - y)[Math.floor(values.length / 2)]!;
    const ratio = median(times.unknown) / median(times.wrong);
    expect(ratio, `medians ${median(times.unknown)} ns and ${median(times.wrong)} ns`).toBeGreaterThan(0.8);
    expect(ratio, `medians ${median(times.unknown)} ns and ${median(times.wrong)} ns`).toBeLessThan(1.25);
  }, 60_000);

  it('reads storage once for a busy key, and again only after the revalidation interval', async () => {
    const { key } = await identity.mintKey({ accountId: 'acme' });
    meter.reset();
    await Promise.all([identity.verifier.verify(key), identity.verifier.verify(key)]);
    for (let i = 0; i < 20; i++) await identity.verifier.verify(key);
    expect(meter.lookups).toBe(1);
    clock += 999;
    await identity.verifier.verify(key);
    expect(meter.lookups).toBe(1);
    clock += 1;
    await identity.verifier.verify(key);
    expect(meter.lookups).toBe(2);
    // Each use still hashes and compares the presented secret.
    expect(meter.digests).toBe(24);
  });

  it('refuses at once a key revoked through this process', async () => {
    const { key, id } = await identity.mintKey({ accountId: 'acme' });
    await identity.verifier.verify(key);
    expect(await identity.keys.revoke(id)).toBe('revoked');
    expect(await refusal(identity.verifier.verify(key))).toBe('the API key has been revoked');
  });

  it('refuses within one second a key revoked by another process', async () => {
    const { key, id } = await identity.mintKey({ accountId: 'acme' });
    await identity.verifier.verify(key);
    // Another process: its own service and bus over the same storage, no way to reach this cache.
    const other = createTestIdentity(backend, { options: { now: () => clock } });
    expect(await other.keys.revoke(id)).toBe('revoked');
    await other.close();
    clock += 500;
    await identity.verifier.verify(key);
    clock += 500;
    expect(await refusal(identity.verifier.verify(key))).toBe('the API key has been revoked');
  });

  it('refuses a key from the moment of its expiresAt, even while cached', async () => {
    const expiresAt = new Date(clock + 60_000).toISOString();
    const { key } = await identity.mintKey({ accountId: 'acme', expiresAt });
    await identity.verifier.verify(key);
    clock += 59_999;
    meter.reset();
    await identity.verifier.verify(key);
    clock += 1;
    expect(await refusal(identity.verifier.verify(key))).toBe('the API key has expired');
  });

  describe('checked again, before a held sync request answers (D27)', () => {
    it('answers from memory however long ago the key was read, and refuses it once expired', async () => {
      const expiresAt = new Date(clock + 3_600_000).toISOString();
      const { key, id } = await identity.mintKey({ accountId: 'acme', expiresAt });
      await identity.verifier.verify(key);
      clock += 60_000;
      meter.reset();
      await identity.verifier.recheck(id);
      clock += 3_540_000;
      expect(await refusal(identity.verifier.recheck(id))).toBe('the API key has expired');
      expect(meter).toMatchObject({ digests: 0, lookups: 0 });
    });

    it('refuses a key revoked meanwhile, from memory', async () => {
      const { key, id } = await identity.mintKey({ accountId: 'acme' });
      await identity.verifier.verify(key);
      expect(await identity.keys.revoke(id)).toBe('revoked');
      clock += 60_000;
      meter.reset();
      expect(await refusal(identity.verifier.recheck(id))).toBe('the API key has been revoked');
      expect(meter.lookups).toBe(0);
    });

    it('reads a key it no longer holds once for every check that asks meanwhile, then holds it', async () => {
      const { id } = await identity.mintKey({ accountId: 'acme' });
      meter.reset();
      await Promise.all(Array.from({ length: 50 }, () => identity.verifier.recheck(id)));
      expect(meter.lookups).toBe(1);
      clock += 60_000;
      await identity.verifier.recheck(id);
      expect(meter.lookups).toBe(1);
    });

    it('reads storage while memory may not be served (D31), and so sees a revocation it was not told of', async () => {
      const behind = createTestIdentity(backend, {
        options: { keyLookup: meter.wrap, now: () => clock, trust: { trusted: false, outage: false } },
      });
      try {
        const { key, id } = await behind.mintKey({ accountId: 'acme' });
        await behind.verifier.verify(key);
        meter.reset();
        await behind.verifier.recheck(id);
        expect(meter.lookups).toBe(1);
        // Revoked by another process, on a bus this one does not hear.
        expect(await identity.keys.revoke(id)).toBe('revoked');
        expect(await refusal(behind.verifier.recheck(id))).toBe('the API key has been revoked');
      } finally {
        await behind.close();
      }
    });
  });

  describe('from memory alone (the auth hook tries this first, without a promise)', () => {
    it('grants a cached, fresh, live key what verify grants, without reading storage', async () => {
      const { key } = await identity.mintKey({ accountId: 'acme', scopes: ['playbook:read'] });
      meter.reset();
      expect(identity.verifier.verifyFromMemory(key)).toBeUndefined(); // not held yet
      const verified = await identity.verifier.verify(key);
      meter.reset();
      expect(identity.verifier.verifyFromMemory(key)).toEqual(verified);
      expect(meter).toMatchObject({ digests: 1, lookups: 0 });
      expect(identity.usage.pending(verified.keyId)).toBe(new Date(clock).toISOString());
    });

    it('leaves to verify a malformed key, a wrong secret, a stale entry, a revoked or expired key', async () => {
      const expiresAt = new Date(clock + 60_000).toISOString();
      const { id, key } = await identity.mintKey({ accountId: 'acme', expiresAt });
      await identity.verifier.verify(key);
      const wrongSecret = composeApiKey('test', parseApiKey(key)!.keyId, generateApiKey('test').secret);
      expect(identity.verifier.verifyFromMemory(wrongSecret)).toBeUndefined();
      expect(identity.verifier.verifyFromMemory(`${key}0`)).toBeUndefined();
      // Its checksum is not checked here, but a changed checksum changes the secret's digest.
      const badChecksum = key.slice(0, -1) + (key.at(-1) === 'x' ? 'y' : 'x');
      expect(identity.verifier.verifyFromMemory(badChecksum)).toBeUndefined();
      expect(await refusal(identity.verifier.verify(badChecksum))).toBe('the API key is malformed');
      expect(identity.verifier.verifyFromMemory(generateApiKey('live').key)).toBeUndefined();
      clock += 1000; // the revalidation interval: storage must be read again
      expect(identity.verifier.verifyFromMemory(key)).toBeUndefined();
      await identity.verifier.verify(key);
      clock += 59_000; // past expiresAt, though cached and fresh
      expect(identity.verifier.verifyFromMemory(key)).toBeUndefined();
      clock -= 59_000;
      expect(identity.verifier.verifyFromMemory(key)).toBeDefined();
      expect(await identity.keys.revoke(id)).toBe('revoked');
      expect(identity.verifier.verifyFromMemory(key)).toBeUndefined();
    });

    it('spends one digest on an unknown key id as on a wrong secret', async () => {
      const { key } = await identity.mintKey({ accountId: 'acme' });
      await identity.verifier.verify(key);
      const random = () => generateApiKey('test').secret.slice(0, 33);
      const costOf = (presented: string) => {
        meter.reset();
        expect(identity.verifier.verifyFromMemory(presented)).toBeUndefined();
        return meter.digests;
      };
      expect(costOf(composeApiKey('test', 'Unknown0KeyId000', random()))).toBe(1);
      expect(costOf(composeApiKey('test', parseApiKey(key)!.keyId, random()))).toBe(1);
    });
  });

  it('records lastUsedAt in memory and writes it in one batch on flush, not per request', async () => {
    const a = await identity.mintKey({ accountId: 'acme' });
    const b = await identity.mintKey({ accountId: 'acme' });
    const usedAt = new Date(clock).toISOString();
    for (let i = 0; i < 5; i++) await identity.verifier.verify(a.key);
    await identity.verifier.verify(b.key);
    const stored = () =>
      backend.databases.primary
        .selectFrom('api_keys')
        .select(['id', 'last_used_at'])
        .where('id', 'in', [a.id, b.id])
        .execute();
    expect((await stored()).map((row) => row.last_used_at)).toEqual([null, null]);
    // The list already shows the pending time.
    const listed = await identity.keys.list('acme');
    expect(listed.find((k) => k.id === a.id)?.lastUsedAt).toBe(usedAt);

    await identity.usage.flush();
    expect((await stored()).map((row) => row.last_used_at)).toEqual([usedAt, usedAt]);

    // A later flush never moves the time backwards.
    identity.usage.record(a.id, Date.parse('2000-01-01T00:00:00.000Z'));
    await identity.usage.flush();
    expect((await stored()).find((row) => row.id === a.id)?.last_used_at).toBe(usedAt);
  });

  it('writes each key its own time, in batches of many keys', async () => {
    const a = await identity.mintKey({ accountId: 'acme' });
    const b = await identity.mintKey({ accountId: 'acme' });
    const base = Date.parse('2030-01-01T00:00:00.000Z');
    // 1,200 uses among which the two keys fall in different statements (500 keys a statement).
    const ids = Array.from({ length: 1200 }, (_, i) => `unknown-key-${i}`);
    ids[10] = a.id;
    ids[900] = b.id;
    for (const [i, id] of ids.entries()) identity.usage.record(id, base + i * 1000);
    await identity.usage.flush();
    const rows = await backend.databases.primary
      .selectFrom('api_keys')
      .select(['id', 'last_used_at'])
      .where('id', 'in', [a.id, b.id])
      .execute();
    expect(Object.fromEntries(rows.map((row) => [row.id, row.last_used_at]))).toEqual({
      [a.id]: new Date(base + 10_000).toISOString(),
      [b.id]: new Date(base + 900_000).toISOString(),
    });
  });

  it('writes pending usage on close', async () => {
    const { key, id } = await identity.mintKey({ accountId: 'acme' });
    await identity.verifier.verify(key);
    await identity.close();
    const row = await backend.databases.primary
      .selectFrom('api_keys')
      .select('last_used_at')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(row.last_used_at).toBe(new Date(clock).toISOString());
  });
});
