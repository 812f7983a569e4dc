import { isLoopbackUrl } from '@playbook/client';
import * as oauth from 'oauth4webapi';
import { SIGN_IN_CHANNEL, type SignInMessage } from './sign-in-channel';

/** A token from the identity provider, and when it stops working (milliseconds since the epoch). */
export interface ProviderToken {
  readonly accessToken: string;
  readonly expiresAt: number;
}

/** How long a sign-in without a prompt may take before the sign-in page is shown instead. */
const SILENT_TIMEOUT_MS = 8000;
/** How often the console looks whether the user closed the sign-in window. */
const WINDOW_POLL_MS = 500;
/** A token whose answer gives no lifetime is trusted for this long before a new one is asked for. */
const DEFAULT_LIFETIME_S = 300;

/**
 * D33's sign-in with an identity provider: OpenID Connect's authorization code flow with PKCE
 * (oauth4webapi), in a window of its own, so that the console keeps the verifier and the state in
 * memory and keeps the page the user was on; the provider's answer comes back through the callback
 * page on a channel of this origin (sign-in-channel.ts). A reload signs in again without a prompt
 * where the provider allows it, in a hidden frame.
 */
export class OidcSignIn {
  private server: Promise<oauth.AuthorizationServer> | undefined;
  private readonly client: oauth.Client;
  private readonly redirectUri: string;
  /** oauth4webapi refuses plain http unless told; the configuration takes it for a loopback issuer only. */
  private readonly insecure: boolean;

  constructor(
    private readonly issuer: string,
    clientId: string,
    origin: string,
  ) {
    this.client = { client_id: clientId };
    this.redirectUri = `${origin}/console/callback`;
    this.insecure = issuer.startsWith('http:') && isLoopbackUrl(issuer);
  }

  /** The provider's host, to name it on the button. */
  get providerName(): string {
    return new URL(this.issuer).host;
  }

  private discover(): Promise<oauth.AuthorizationServer> {
    this.server ??= (async () => {
      const issuer = new URL(this.issuer);
      const response = await oauth.discoveryRequest(issuer, {
        algorithm: 'oidc',
        [oauth.allowInsecureRequests]: this.insecure,
      });
      return oauth.processDiscoveryResponse(issuer, response);
    })().catch((error: unknown) => {
      this.server = undefined;
      throw error;
    });
    return this.server;
  }

  /**
   * Signs in in a window of its own. Opened before anything is awaited, while the click that asked for
   * it still lets a page open a window.
   */
  async signIn(): Promise<ProviderToken> {
    const popup = window.open('about:blank', 'playbook-sign-in', 'popup,width=520,height=680');
    if (!popup) throw new Error('the browser did not open the sign-in window: allow pop-ups for this page');
    try {
      return await this.run(false, (url) => {
        popup.location.href = url;
        return {
          gone: () => popup.closed,
          close: () => popup.close(),
        };
      });
    } finally {
      if (!popup.closed) popup.close();
    }
  }

  /** Signs in without a prompt, in a hidden frame; undefined when the provider wants the user. */
  async signInSilently(): Promise<ProviderToken | undefined> {
    try {
      return await this.run(true, (url) => {
        const frame = document.createElement('iframe');
        frame.hidden = true;
        frame.title = 'Sign-in';
        frame.src = url;
        document.body.append(frame);
        return { gone: () => false, close: () => frame.remove() };
      });
    } catch {
      return undefined;
    }
  }

  private async run(
    silent: boolean,
    open: (url: string) => { gone(): boolean; close(): void },
  ): Promise<ProviderToken> {
    const server = await this.discover();
    if (!server.authorization_endpoint)
      throw new Error('the identity provider has no authorization endpoint');
    const verifier = oauth.generateRandomCodeVerifier();
    const state = oauth.generateRandomState();
    const url = new URL(server.authorization_endpoint);
    url.search = new URLSearchParams({
      client_id: this.client.client_id,
      redirect_uri: this.redirectUri,
      response_type: 'code',
      scope: 'openid',
      state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      ...(silent ? { prompt: 'none' } : {}),
    }).toString();
    const answer = await this.answerTo(state, open(url.toString()), silent);
    const params = oauth.validateAuthResponse(server, this.client, new URL(answer), state);
    const response = await oauth.authorizationCodeGrantRequest(
      server,
      this.client,
      oauth.None(),
      params,
      this.redirectUri,
      verifier,
      { [oauth.allowInsecureRequests]: this.insecure },
    );
    const token = await oauth.processAuthorizationCodeResponse(server, this.client, response);
    return {
      accessToken: token.access_token,
      expiresAt: Date.now() + (token.expires_in ?? DEFAULT_LIFETIME_S) * 1000,
    };
  }

  /** The callback's address whose state is this sign-in's; other sign-ins' answers are not ours. */
  private answerTo(
    state: string,
    opened: { gone(): boolean; close(): void },
    silent: boolean,
  ): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      const channel = new BroadcastChannel(SIGN_IN_CHANNEL);
      const done = () => {
        channel.close();
        clearInterval(watch);
        clearTimeout(timeout);
        opened.close();
      };
      channel.onmessage = (event: MessageEvent<SignInMessage>) => {
        const url = typeof event.data?.url === 'string' ? event.data.url : undefined;
        if (url === undefined || new URL(url).searchParams.get('state') !== state) return;
        done();
        resolve(url);
      };
      const watch = setInterval(() => {
        if (!opened.gone()) return;
        done();
        reject(new Error('the sign-in window was closed before the sign-in ended'));
      }, WINDOW_POLL_MS);
      const timeout = silent
        ? setTimeout(() => {
            done();
            reject(new Error('the identity provider did not answer without a prompt'));
          }, SILENT_TIMEOUT_MS)
        : undefined;
    });
  }
}
