#!/usr/bin/env node
// The reference agent's command line (`npx keel-agent`): runs agent/cli.ts through tsx.
import { register } from 'tsx/esm/api';

register();
await import('../agent/cli.ts');
