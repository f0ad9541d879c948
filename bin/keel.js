#!/usr/bin/env node
// Keel's command line (`npm start` is `keel serve`): runs the esbuild bundle of src/main.ts,
// rebuilding it first when src/ changed (see bin/build.js), and for `serve` the web console (bin/console.js). Tests run src/ directly through tsx.
import { pathToFileURL } from 'node:url';
import { ensureBuilt } from './build.js';

const main = await ensureBuilt();
// `serve` answers the web console at / too: built (or rebuilt when web/ changed) before start.
if (process.argv[2] === 'serve' && process.env.CONSOLE_DIR === undefined) {
  const { ensureConsoleBuilt } = await import('./console.js');
  process.env.CONSOLE_DIR = await ensureConsoleBuilt();
}
await import(pathToFileURL(main).href);
