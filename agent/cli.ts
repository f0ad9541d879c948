/**
 * `npm run agent` / `npx keel-agent`: the reference agent (agent/agent.ts) from environment variables.
 *
 *   KEEL_URL                 Keel's base URL (default http://127.0.0.1:3000)
 *   KEEL_ENROLLMENT_KEY      organisation enrolment key (first start; the identity is then kept)
 *   KEEL_AGENT_DIR           state directory (default ./agent-state)
 *   KEEL_AGENT_BINARY        the managed binary (default <KEEL_AGENT_DIR>/bin/agent)
 *   KEEL_AGENT_VERSION       version of that binary at first start (default 0.0.0)
 *   KEEL_AGENT_WATCHDOG      true: restart the binary on exit, restore the backup when it fails to start
 *   KEEL_HELPER_VERSION      the helper component's installed version: set, the agent manages the helper
 *   KEEL_HELPER_BINARY       the helper's file (default <directory of the binary>/helper)
 *   KEEL_WATCHDOG_VERSION, KEEL_WATCHDOG_BINARY   the same for the watchdog component
 *   KEEL_AGENT_HEALTHY_WITHIN_SECONDS   a new binary must start, pass its self-check and reach Keel within this (default 150)
 *   KEEL_AGENT_SOAK_SECONDS  and then stay healthy this long before the update counts (default 60; 0: no soak)
 *
 * The release keys it checks offers with come from the enrolment answer (kept in the state directory).
 */
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { Agent, HEALTHY_WITHIN_MS, SOAK_MS, type AgentOptions } from './agent.js';

const USAGE = `Usage: keel-agent            (runs the agent; configured by environment variables)
       keel-agent --help     (this text)

  KEEL_URL                 Keel's base URL (default http://127.0.0.1:3000)
  KEEL_ENROLLMENT_KEY      the organisation's enrolment key (first start; the identity is then kept)
  KEEL_AGENT_DIR           state directory (default ./agent-state)
  KEEL_AGENT_BINARY        the managed binary (default <KEEL_AGENT_DIR>/bin/agent)
  KEEL_AGENT_VERSION       version of that binary at first start (default 0.0.0)
  KEEL_AGENT_WATCHDOG      true: restart the binary on exit, restore the backup when it fails to start
  KEEL_HELPER_VERSION, KEEL_HELPER_BINARY       the helper component, when the agent manages it
  KEEL_WATCHDOG_VERSION, KEEL_WATCHDOG_BINARY   the watchdog component, likewise
  KEEL_AGENT_HEALTHY_WITHIN_SECONDS   a new binary must start, pass its self-check
                           (<binary> --self-check prints "healthy", exits 0) and reach Keel
                           within this, else it is rolled back (default 150)
  KEEL_AGENT_SOAK_SECONDS  ... and then keep running and reaching Keel this long (default 60; 0: none)

Example: KEEL_URL=https://keel.example.com KEEL_ENROLLMENT_KEY=<key> npx keel-agent
`;

// Arguments are only for help: anything else is a mistake, said before any state is written.
const [arg, ...extra] = process.argv.slice(2);
if (arg !== undefined) {
  if (['--help', '-h', 'help'].includes(arg) && extra.length === 0) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  process.stderr.write(`keel-agent: unexpected argument "${arg.replace(/[^\x20-\x7e]/g, '?').slice(0, 40)}" (settings are environment variables)\n\n${USAGE}`);
  process.exit(2);
}

/** A whole number of seconds from the environment (`min` and up), in ms; a wrong value stops the agent (exit 2). */
function secondsFromEnv(name: string, fallbackMs: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallbackMs;
  if (!/^\d{1,7}$/.test(raw.trim()) || Number(raw) < min) {
    process.stderr.write(`keel-agent: ${name} must be a whole number of seconds, at least ${min}\n`);
    process.exit(2);
  }
  return Number(raw) * 1000;
}

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', ia32: '386', arm: 'arm' };
const OS: Record<string, string> = { win32: 'windows', darwin: 'darwin', linux: 'linux' };

const dir = resolve(process.env.KEEL_AGENT_DIR ?? './agent-state');
/** Each other component the agent manages: its version and (optionally) its own file. */
const components: NonNullable<AgentOptions['components']> = {};
for (const c of ['helper', 'watchdog'] as const) {
  const version = process.env[`KEEL_${c.toUpperCase()}_VERSION`];
  const path = process.env[`KEEL_${c.toUpperCase()}_BINARY`];
  if (version) components[c] = { initialVersion: version, ...(path ? { path } : {}) };
}
const options: AgentOptions = {
  server: (process.env.KEEL_URL ?? 'http://127.0.0.1:3000').replace(/\/+$/, ''),
  ...(process.env.KEEL_ENROLLMENT_KEY ? { enrollmentKey: process.env.KEEL_ENROLLMENT_KEY } : {}),
  stateDir: dir,
  binaryPath: process.env.KEEL_AGENT_BINARY ?? join(dir, 'bin', 'agent'),
  initialVersion: process.env.KEEL_AGENT_VERSION ?? '0.0.0',
  hostname: hostname(),
  os: OS[process.platform] ?? process.platform,
  arch: ARCH[process.arch] ?? process.arch,
  watchdog: /^(1|true|yes)$/i.test(process.env.KEEL_AGENT_WATCHDOG ?? ''),
  healthyWithinMs: secondsFromEnv('KEEL_AGENT_HEALTHY_WITHIN_SECONDS', HEALTHY_WITHIN_MS, 1),
  soakMs: secondsFromEnv('KEEL_AGENT_SOAK_SECONDS', SOAK_MS, 0),
  components,
  log: (m) => process.stderr.write(`keel-agent: ${m}\n`),
};
let agent: Agent;
try {
  agent = new Agent(options);
} catch (err) {
  process.stderr.write(`keel-agent: ${(err as Error).message}\n`);
  process.exit(1);
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void agent.shutdown().then(() => process.exit(0));
  });
}
try {
  await agent.run();
} catch (err) {
  process.stderr.write(`keel-agent: ${(err as Error).message}\n`);
  process.exit(1);
}
