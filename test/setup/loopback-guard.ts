/**
 * vitest setup file of both projects: installs the loopback guard (`loopback-guard.mjs`) in every
 * test worker. A test during which anything looked up a name or dialled an address off this machine
 * fails after it, naming what was reached, even when the code under test swallowed the error.
 */
import { afterEach } from 'vitest';
// A plain ES module (typed by loopback-guard.d.mts), shared with child processes (NODE_OPTIONS=--import).
import { installLoopbackGuard } from './loopback-guard.mjs';

const violations: string[] = [];
installLoopbackGuard((message) => violations.push(message));

/** The violations recorded so far, cleared (for the guard's own test). */
export function takeLoopbackViolations(): string[] {
  return violations.splice(0);
}

afterEach(() => {
  const seen = takeLoopbackViolations();
  if (seen.length > 0) throw new Error(`This test reached off loopback: ${[...new Set(seen)].join('; ')}. Inject a resolver or use a 127.0.0.1 server (docs/testing.md "Network").`);
});
