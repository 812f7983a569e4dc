import { render } from 'preact';
import { App } from './app';
import { OidcSignIn } from './oidc';
import { readSettings } from './settings';
import './styles.css';

const settings = readSettings(document);
const oidc = settings.oidc
  ? new OidcSignIn(settings.oidc.issuer, settings.oidc.clientId, location.origin)
  : undefined;
render(<App settings={settings} oidc={oidc} />, document.getElementById('app')!);
