import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { holdsCredential, redactCredentials, redactUrl } from '../../src/foundation/redact-url.js';
import { composeApiKey, generateApiKey } from '../../src/schemas/api-key-format.js';

const TEST_KEY = generateApiKey('test');
const LIVE_KEY = generateApiKey('live');
const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
/** A compact JWS of D9's form; the signature is random bytes, which is all a redactor can see. */
const TOKEN = `${part({ alg: 'ES256', kid: 'k1' })}.${part({ sub: 'ada', accounts: ['acme'], exp: 2e9 })}.${Buffer.from('s'.repeat(64)).toString('base64url')}`;
/** A JSON header with white space before its first member encodes as `ew…`, not `eyJ…`. */
const SPACED_TOKEN = `${Buffer.from('{\n  "alg": "HS256"}').toString('base64url')}.${part({ sub: 'x' })}.c2lnbmF0dXJl`;
const SECRETS = [
  { text: TEST_KEY.key, parts: [TEST_KEY.secret] },
  { text: LIVE_KEY.key, parts: [LIVE_KEY.secret] },
  { text: TOKEN, parts: TOKEN.split('.').slice(1) },
  { text: SPACED_TOKEN, parts: SPACED_TOKEN.split('.').slice(1) },
];

/**
 * The shortest of up to three runs of the same work, in milliseconds; it stops at the first within
 * `boundMs`. A machine that stops the process during a run (a shared one does, now and then) lengthens
 * that run alone, where work that grows faster than its input lengthens every run.
 */
function shortestRunMs(work: () => unknown, boundMs: number): number {
  let shortest = Number.POSITIVE_INFINITY;
  for (let run = 0; run < 3 && shortest >= boundMs; run++) {
    const started = performance.now();
    work();
    shortest = Math.min(shortest, performance.now() - started);
  }
  return shortest;
}

/** Every character escaped, in either case of hex digit. */
const escapeAll = (text: string, upper: boolean) =>
  [...Buffer.from(text)]
    .map((byte) => `%${byte.toString(16).padStart(2, '0')}`[upper ? 'toUpperCase' : 'toLowerCase']())
    .join('');

function expectNone(written: string, secret: (typeof SECRETS)[number]): void {
  expect(written).not.toContain(secret.text);
  for (const piece of secret.parts) expect(written).not.toContain(piece);
  expect(holdsCredential(written)).toBe(false);
}

describe('redactUrl (D21)', () => {
  it('leaves a URL without a credential as it is, the same string', () => {
    for (const url of [
      '/v3/playbook/resources/0f7f2a4e-3b9c-4c58-9e7a-2d5f0c3b1e11',
      '/v3/playbook/catalogs/svc/bench/resources?pageSize=25&page=3',
      '/v3/playbook/catalogs?kind=skill&q=hello%20world',
      '/v3/identity/api-keys?accountId=acme.eu',
      '/files/v1.2.3/read.me',
      '/v3/identity/api-keys/abcDEF123456ghij',
    ]) {
      expect(redactUrl(url)).toBe(url);
    }
  });

  it('redacts the value of the six credential names of D21, whatever it holds, in any case or escape', () => {
    expect(redactUrl('/x?api_key=abc&b=2')).toBe('/x?api_key=[redacted]&b=2');
    expect(redactUrl('/x?a=1&TOKEN=hello')).toBe('/x?a=1&TOKEN=[redacted]');
    expect(redactUrl('/x?x%2Dapi%2Dkey=v')).toBe('/x?x%2Dapi%2Dkey=[redacted]');
    expect(redactUrl('/x?Access_Token=v&key=w')).toBe('/x?Access_Token=[redacted]&key=[redacted]');
    expect(redactUrl('/x?a=1?api_key=abc&b=2')).toBe('/x?a=1?api_key=[redacted]&b=2');
    expect(redactUrl('/x?apikey')).toBe('/x?apikey');
    expect(redactUrl('/x?token=')).toBe('/x?token=');
    // A value is what the service parses: up to the next `&`, a `?` or `;` in it included.
    expect(redactUrl('/x?token=abc?def;ghi&b=2')).toBe('/x?token=[redacted]&b=2');
    expect(redactUrl('/x?a=b=c&key=v=w')).toBe('/x?a=b=c&key=[redacted]');
  });

  it('finds a key or a token by its form under any name, as the name, inside another value or in the path', () => {
    for (const secret of SECRETS) {
      const s = secret.text;
      const cases: [string, string][] = [
        [`/x?api-key=${s}`, '/x?api-key=[redacted]'],
        [`/x?accessToken=${s}&page=2`, '/x?accessToken=[redacted]&page=2'],
        [`/x?kind=${s}`, '/x?kind=[redacted]'],
        [`/x?${s}=1`, '/x?[redacted]=1'],
        [`/x?${s}`, '/x?[redacted]'],
        [`/x?a=1?api_key=${s}`, '/x?a=1?api_key=[redacted]'],
        [`/x?authorization=Bearer%20${s}`, '/x?authorization=Bearer%20[redacted]'],
        [`/x?authorization=Bearer+${s}`, '/x?authorization=Bearer+[redacted]'],
        [`/x?id_token=abc${s}`, '/x?id_token=abc[redacted]'],
        [`/v3/playbook/catalogs/svc/${s}/resources`, '/v3/playbook/catalogs/svc/[redacted]/resources'],
        [`/${s}`, '/[redacted]'],
      ];
      for (const [url, written] of cases) {
        expect(redactUrl(url), url).toBe(written);
        expectNone(redactUrl(url), secret);
      }
    }
  });

  it('finds a credential hidden by escapes, escaped once, twice, or a character here and there', () => {
    for (const secret of SECRETS) {
      const s = secret.text;
      const urls = [
        `/x?q=${escapeAll(s, true)}&page=1`,
        `/x?q=${escapeAll(s, false)}`,
        `/x?q=${s.replaceAll('_', '%5F').replaceAll('.', '%2E')}`,
        `/x?q=${s.replaceAll('_', '%255F').replaceAll('.', '%252E')}`,
        `/x/${encodeURIComponent(escapeAll(s, true))}/y`,
        `/x?authorization=${encodeURIComponent(`Bearer ${s}`)}`,
        `/x?next=${encodeURIComponent(`/v3/y?api_key=${s}`)}`,
      ];
      for (const url of urls) {
        const written = redactUrl(url);
        expect(written, url).toContain('[redacted]');
        expectNone(written, secret);
        expectNone(decodeURIComponent(decodeURIComponent(written.replaceAll('%25', '%'))), secret);
      }
    }
    // The run as sent is what is replaced, escapes and all, and nothing around it.
    const s = TEST_KEY.key;
    expect(redactUrl(`/a%20b?q=x%20${s.replaceAll('_', '%5F')}%20y`)).toBe('/a%20b?q=x%20[redacted]%20y');
  });

  it('tells a JWS by its header: three base64url parts, the first a JSON object', () => {
    expect(redactUrl('/x?t=aGVsbG8.d29ybGQ.Zm9v')).toBe('/x?t=aGVsbG8.d29ybGQ.Zm9v');
    expect(redactUrl('/x?t=eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.')).toBe('/x?t=[redacted]');
    expect(redactUrl(`/x?t=${TOKEN}.more.parts`)).toBe('/x?t=[redacted]');
    expect(redactUrl(`/x?t=keyeyJ${TOKEN.slice(3)}`)).toBe('/x?t=key[redacted]');
    expect(redactUrl('/x?v=1.2.3&w=eyJ.only')).toBe('/x?v=1.2.3&w=eyJ.only');
  });

  it('redacts whatever is planted, wherever, under whatever name (property)', () => {
    const name = fc.stringMatching(/^[A-Za-z][\w.-]{0,11}$/);
    const escapes = fc.constantFrom<(text: string) => string>(
      (text) => text,
      encodeURIComponent,
      (text) => escapeAll(text, true),
      (text) => text.replaceAll('_', '%5f'),
      (text) => encodeURIComponent(encodeURIComponent(text)),
    );
    const place = fc.constantFrom<(n: string, v: string) => string>(
      (n, v) => `/v3/x?${n}=${v}`,
      (n, v) => `/v3/x?a=1&${n}=${v}&b=2`,
      (n, v) => `/v3/x?${v}=${n}`,
      (n, v) => `/v3/x?a=1?${n}=${v}`,
      (n, v) => `/v3/x?${n}=Bearer%20${v}`,
      (n, v) => `/v3/${n}/${v}`,
      (n, v) => `/${v}/${n}?page=1`,
    );
    fc.assert(
      fc.property(fc.constantFrom(...SECRETS), name, escapes, place, (secret, n, escapeOf, at) => {
        const url = at(n, escapeOf(secret.text));
        const written = redactUrl(url);
        expect(written).toContain('[redacted]');
        expectNone(written, secret);
        // Nothing but the credential is touched: the name and the rest of the URL are still there.
        expect(written).toContain(n);
      }),
      { numRuns: 500 },
    );
  });

  it('costs one failed test on an ordinary URL, and linear time on a long hostile one', () => {
    const hostile = [
      `/x?q=${'a'.repeat(8000)}.b`,
      `/x?q=${'ey'.repeat(4000)}.a.b`,
      `/x?q=${'%25'.repeat(2500)}41`,
      `/${'svc_sk_'.repeat(1000)}`,
      `/x?${'e.'.repeat(4000)}`,
      `/x?${'token=a?'.repeat(1000)}`,
      `/x?${'a=?'.repeat(3000)}`,
      // A dot, then look-alikes of a token's header with no dot after them.
      `/x?q=.${'ey'.repeat(8000)}`,
      `/x.y/${'ew-'.repeat(5000)}`,
    ];
    for (const url of hostile) {
      expect(
        shortestRunMs(() => redactUrl(url), 50),
        url.slice(0, 20),
      ).toBeLessThan(50);
    }
  });
});

describe('redactCredentials (D21)', () => {
  it('redacts credential-shaped runs in free text, and leaves the text alone otherwise', () => {
    expect(redactCredentials(`no catalog svc/${TEST_KEY.key}`)).toBe('no catalog svc/[redacted]');
    expect(redactCredentials(`token ${TOKEN}, then ${LIVE_KEY.key}.`)).toBe(
      'token [redacted], then [redacted].',
    );
    expect(redactCredentials('key api_key=abc is not a form')).toBe('key api_key=abc is not a form');
    const plain = 'The request is invalid.';
    expect(redactCredentials(plain)).toBe(plain);
  });

  it('takes linear time on a megabyte of look-alikes (a parser error may quote a whole body)', () => {
    for (const text of [
      `. ${'ey'.repeat(500_000)}`,
      `${'eyJ.'.repeat(250_000)}`,
      `${'svc_sk_.'.repeat(130_000)}`,
    ]) {
      expect(
        shortestRunMs(() => redactCredentials(text), 500),
        text.slice(0, 12),
      ).toBeLessThan(500);
    }
  });

  it('redacts a key whose checksum fails or that is cut short: its secret part is still secret', () => {
    const cut = composeApiKey('test', 'abcdefABCDEF1234', 'x'.repeat(20));
    expect(redactCredentials(`a ${cut.slice(0, 30)} b`)).toBe('a [redacted] b');
  });
});
