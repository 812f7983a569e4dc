#!/usr/bin/env node
// The compiled CLI is built by `npm ci` (the `prepare` script) and by `npm run build`.
import '../dist/cli/main.js';
