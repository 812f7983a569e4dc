import { resolve } from 'node:path';
import { defineConfig } from 'vite';

/**
 * The console's build (D33): two pages, the console itself and the identity provider's return, served
 * by the service under /console with hashed asset names (immutable, so cached for a year). No inline
 * script, no eval and no inline style anywhere in the output: the service's Content-Security-Policy
 * allows the console's own files only.
 */
export default defineConfig({
  base: '/console/',
  root: import.meta.dirname,
  publicDir: false,
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    // Files are never inlined as data: URLs, so that every one is an asset the policy names by origin.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    target: 'es2022',
    sourcemap: false,
    rollupOptions: {
      input: {
        index: resolve(import.meta.dirname, 'index.html'),
        callback: resolve(import.meta.dirname, 'callback.html'),
      },
    },
  },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
});
