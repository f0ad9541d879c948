import { createKeel, type Keel, type KeelOptions } from './keel.js';
import { seedAccess } from './modules/access/seed.js';
import { getAccessSummary } from './modules/access/service.js';
import { bootstrapAdmin } from './modules/identity/bootstrap.js';
import { installIdentity } from './modules/identity/context.js';
import { installAccess } from './modules/access/module.js';
import { installMfa } from './modules/mfa/webauthn.js';
import { installSso } from './modules/sso/module.js';
import { installUsers } from './modules/users/invitations.js';
import { enrolledMethods, loginSecondFactor, passkeyCount } from './modules/mfa/login.js';
import { installWebhooks } from './modules/webhooks/runtime.js';
import { installAgents } from './modules/agents/context.js';
import { installDomains } from './modules/domains/service.js';
import { installScim } from './modules/scim/tokens.js';
import { installAudit } from './modules/audit/module.js';
import { installSiem } from './modules/siem/module.js';
import { STREAM_SEALED } from './modules/siem/secrets.js';
import { MFA_SEALED } from './modules/mfa/service.js';
import { WEBHOOK_SEALED } from './modules/webhooks/service.js';
import { PROVIDER_SEALED } from './modules/sso/providers.js';
import { IDENTITY_SEALED } from './modules/sso/provisioning.js';
import { SINGLE_USE_SEALED } from './platform/single-use.js';
import type { SealedColumn } from './platform/reseal.js';
import type { ProcessRole } from './platform/module.js';

/**
 * The composition root of a process (docs/architecture.md): builds the container (`createKeel`),
 * runs the modules' start-up work on the migrated database, and installs the modules. Every process
 * (`keel serve`, `keel worker`, tests, benchmarks) gets its Keel here, so no module is ever used
 * uninstalled; it then starts the jobs of its roles (`processRoles`).
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
  try {
    installModules(keel);
  } catch (err) {
    await keel.close();
    throw err;
  }
  return keel;
}

/**
 * Installs every module with state on the container, bottom layer first (docs/architecture.md
 * "Modules and their jobs"): each answers its handle and declares its jobs; none starts here.
 */
export function installModules(keel: Keel): void {
  keel.modules.install('audit', installAudit(keel));
  // Identity's ports (docs/architecture.md "How a lower module reaches a higher one") are answered by modules above it.
  keel.modules.install('identity', installIdentity(keel, { tenantOf: getAccessSummary, enrolledMethods, passkeyCount, secondFactor: loginSecondFactor }));
  keel.modules.install('access', installAccess(keel));
  keel.modules.install('mfa', installMfa(keel));
  keel.modules.install('users', installUsers(keel));
  keel.modules.install('webhooks', installWebhooks(keel));
  keel.modules.install('agents', installAgents(keel));
  keel.modules.install('domains', installDomains(keel));
  // Enforced SSO takes part in password sign-in and reset (identity's password-policy port).
  keel.modules.install('sso', installSso(keel));
  keel.modules.install('scim', installScim(keel));
  keel.modules.install('siem', installSiem(keel));
}

/**
 * The roles of a process: `keel serve` answers the API and, with WORKER=inline (the default), runs the
 * worker's jobs too; `keel worker` runs only those.
 */
export function processRoles(command: 'serve' | 'worker', worker: 'inline' | 'off' = 'inline'): ProcessRole[] {
  if (command === 'worker') return ['worker'];
  return worker === 'inline' ? ['api', 'worker'] : ['api'];
}

/** Every column sealed with the encryption key, as each module declares it: what `keel secrets reseal` moves to the current key. */
export const SEALED_COLUMNS: readonly SealedColumn[] = [...MFA_SEALED, ...WEBHOOK_SEALED, ...PROVIDER_SEALED, ...IDENTITY_SEALED, ...SINGLE_USE_SEALED, ...STREAM_SEALED];
