#!/usr/bin/env node
// Keel's command line (`npm start` is `keel serve`): runs the esbuild bundle of src/main.ts,
// rebuilding it first when src/ changed (see bin/build.js). Tests run src/ directly through tsx.
import { pathToFileURL } from 'node:url';
import { ensureBuilt } from './build.js';

const main = await ensureBuilt();
await import(pathToFileURL(main).href);
