/**
 * How the identity provider's answer reaches the console: the callback page (in the sign-in window,
 * or in a hidden frame for a sign-in without a prompt) posts the address it was sent to on this
 * channel, which only pages of the console's own origin can hear. Nothing is stored: the console
 * keeps the sign-in's verifier and state in memory, and only the console that started a sign-in knows
 * its state.
 */
export const SIGN_IN_CHANNEL = 'playbook-console-sign-in';

export interface SignInMessage {
  /** The callback's whole address: the authorization response is in its query. */
  readonly url: string;
}
