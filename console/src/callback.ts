import { SIGN_IN_CHANNEL, type SignInMessage } from './sign-in-channel';

const message: SignInMessage = { url: location.href };
const channel = new BroadcastChannel(SIGN_IN_CHANNEL);
channel.postMessage(message);
channel.close();
// The one-time code leaves the address bar and the history at once.
history.replaceState(null, '', location.pathname);
// A sign-in window closes itself; a hidden frame is removed by the console.
if (window.parent === window) window.close();
