import { createKeel, type Keel, type KeelOptions } from './keel.js';
import { seedAccess } from './modules/access/seed.js';
import { getAccessSummary } from './modules/access/service.js';
import { bootstrapAdmin } from './modules/identity/bootstrap.js';
import { wireIdentityPorts } from './modules/identity/ports.js';
import { enrolledMethods, loginSecondFactor, passkeyCount } from './modules/mfa/login.js';
import { installWebhooks } from './modules/webhooks/runtime.js';
import { installAgentMetrics } from './modules/agents/context.js';
import { registerEnforcedSso } from './modules/sso/policy.js';
import { MFA_SEALED } from './modules/mfa/service.js';
import { WEBHOOK_SEALED } from './modules/webhooks/service.js';
import { PROVIDER_SEALED } from './modules/sso/providers.js';
import { IDENTITY_SEALED } from './modules/sso/provisioning.js';
import { SINGLE_USE_SEALED } from './platform/single-use.js';
import type { SealedColumn } from './platform/reseal.js';

/**
 * The composition root of a process (docs/architecture.md): builds the container (`createKeel`),
 * runs the modules' start-up work on the migrated database, and hands the lower modules the ports
 * through which they reach modules above them. Every process (`keel serve`, `keel worker`, tests,
 * benchmarks) gets its Keel here, so no module is ever used half-wired.
 */
export async function openKeel(opts: KeelOptions = {}): Promise<Keel> {
  const keel = await createKeel({
    ...opts,
    prepare: async (database, { config, log, migrated }) => {
      // The seed runs with the migrations (a caller that skipped them has seeded too).
      if (migrated) await seedAccess(database.db);
      await bootstrapAdmin(database.db, log, config.ADMIN_EMAIL, config.ADMIN_PASSWORD);
    },
  });
  wireModules(keel);
  return keel;
}

/** The ports and subscriptions of docs/architecture.md, one call per process. */
export function wireModules(keel: Keel): void {
  wireIdentityPorts(keel, {
    tenantOf: getAccessSummary,
    enrolledMethods,
    passkeyCount,
    secondFactor: loginSecondFactor,
  });
  // Enforced SSO takes part in password sign-in and reset (identity's password-policy port).
  registerEnforcedSso(keel);
  // The event router subscribes to the bus; the engine starts where a role runs it (server.ts, main.ts)
  // and stops with the container.
  const webhooks = installWebhooks(keel);
  keel.onClose(() => webhooks.stopWorker({ graceful: false }));
  // Agents' devices-by-status gauge, read on each scrape (its counters are resolved with the module's context).
  installAgentMetrics(keel);
}

/** Every column sealed with the encryption key, as each module declares it: what `keel secrets reseal` moves to the current key. */
export const SEALED_COLUMNS: readonly SealedColumn[] = [...MFA_SEALED, ...WEBHOOK_SEALED, ...PROVIDER_SEALED, ...IDENTITY_SEALED, ...SINGLE_USE_SEALED];
