import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// The console's build (bin/console.js passes root and outDir). `npx vite web` serves it in
// development with the API proxied to a Keel on KEEL_URL (default http://localhost:3000).
export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    // No inline script anywhere: the CSP allows scripts from the origin only.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    target: 'es2022',
  },
  server: {
    proxy: { '/api': 'http://localhost:3000', '/health': 'http://localhost:3000' },
  },
});
