/**
 * The floors of src/ and which way imports may run: down, never up, never in a circle. `npm run lint`
 * checks every import of src/ against these rules.
 *
 * From the bottom: foundations every layer uses (errors, configuration, paging, text order, pacing of
 * long work, the schemas, metrics and traces); infrastructure (the database, HTTP answers, content
 * stores, the change log and its unit of work); the domain (accounts, identity, imports, the read
 * side, the audit list, Redis-shared state, publishing, the docs pages, the console's built files,
 * webhooks, the sync feed); the edge (routes, and the answers they keep in memory); and composition
 * (the app, the services, the command line, the demo).
 */
const FOUNDATIONS = '^src/(foundation|schemas|observability)/';
const INFRASTRUCTURE = '^src/(db|http|content|changes)/';
const DOMAIN =
  '^src/(accounts|auth|catalog-writes|import|catalog|audit|redis|publish|docs|console|webhooks|sync)/';
const EDGE = '^src/(routes|answers)/';
const COMPOSITION = '^src/(composition|cli)/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'a circle of imports has no floor to stand on',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'foundations-stand-alone',
      comment: 'foundations are used by every layer and use none of them',
      severity: 'error',
      from: { path: FOUNDATIONS },
      to: { path: [INFRASTRUCTURE, DOMAIN, EDGE, COMPOSITION] },
    },
    {
      name: 'infrastructure-below-the-domain',
      severity: 'error',
      from: { path: INFRASTRUCTURE },
      to: { path: [DOMAIN, EDGE, COMPOSITION] },
    },
    {
      name: 'domain-below-the-edge',
      severity: 'error',
      from: { path: DOMAIN },
      to: { path: [EDGE, COMPOSITION] },
    },
    {
      name: 'edge-below-composition',
      severity: 'error',
      from: { path: EDGE },
      to: { path: COMPOSITION },
    },
    {
      name: 'identity-below-its-users',
      comment: 'the audit list and the Redis-shared state use identity; identity is handed what it needs',
      severity: 'error',
      from: { path: '^src/auth/' },
      to: { path: '^src/(audit|redis|catalog|import|publish)/' },
    },
    {
      name: 'read-side-returns-values',
      comment:
        'the read side returns domain values and audiences; answers, their keys and HTTP live at the edge',
      severity: 'error',
      from: { path: '^src/catalog/' },
      to: { path: '^src/http/' },
    },
    {
      name: 'routes-above-answers',
      comment: 'the routes use the answers kept in memory; those know nothing of routes',
      severity: 'error',
      from: { path: '^src/answers/' },
      to: { path: '^src/routes/' },
    },
    {
      name: 'every-module-placed',
      comment: 'a module of src/ on no floor is a module no rule checks: give it one',
      severity: 'error',
      from: { path: '^src/', pathNot: [FOUNDATIONS, INFRASTRUCTURE, DOMAIN, EDGE, COMPOSITION] },
      to: {},
    },
  ],
  options: {
    includeOnly: '^src/',
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
  },
};
