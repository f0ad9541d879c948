import type { Keel } from '../../keel.js';
import type { Limit } from '../../platform/rate-limit.js';
import { AccessTokens } from './tokens.js';
import { SessionService } from './sessions.js';
import { Deferred } from './deferred.js';
import { InvalidatedCache } from '../../platform/cache.js';
import { hmacSha256Hex, secretKey } from '../../platform/crypto.js';
import type { KeyObject } from 'node:crypto';
import type { KeelModule } from '../../platform/module.js';
import { PROFILE_TOPIC, USER_TOPIC } from './sessions.js';
import type { IdentityPorts } from './ports.js';
import type { PasswordPolicy } from './password-policy.js';
import type { AccountManager } from './managed.js';
import type { SelfProfile } from './profile.js';

/**
 * The identity module's per-process state: token keys, the session cache, its rate limits and queued
 * work, the self-profile cache, and what the modules above it handed down (ports, password policies).
 */
export interface Identity {
  tokens: AccessTokens;
  sessions: SessionService;
  /** Work run after the answer (forgot-password's token and email). */
  deferred: Deferred;
  limits: {
    /** Logins per IP+email (every attempt). */
    login: Limit;
    /** Failed logins per IP across all emails (a right password gives its point back). */
    loginIp: Limit;
    /** Password re-entries per user (change-password, passkeys, accept-invite of an existing account). */
    passwordReentry: Limit;
    register: Limit;
    registerPartner: Limit;
    forgotPassword: Limit;
  };
  /** What identity needs from the modules above it (ports.ts), handed down by the composition root. */
  ports: IdentityPorts;
  /** The password policies modules above identity registered (password-policy.ts), in order. */
  passwordPolicies: PasswordPolicy[];
  /** Who manages accounts outside Keel (managed.ts), registered by the modules above identity. */
  accountManagers: AccountManager[];
  /** The keys of the CSRF values, one per JWT secret (csrf.ts), imported once. */
  csrfKeys: KeyObject[];
  /** Per-process self-profiles (profile.ts), cleared on the `user` and `profile` topics. */
  profiles: InvalidatedCache<SelfProfile>;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    identity: Identity;
  }
}

/** The identity module of a Keel (installed by the composition root). */
export function identityOf(keel: Keel): Identity {
  return keel.modules.get('identity');
}

/** Installs the identity module with the ports the modules above it answer. It runs no job. */
export function installIdentity(keel: Keel, ports: IdentityPorts): KeelModule<Identity> {
  const c = keel.config;
  return {
    handle: {
      tokens: new AccessTokens(keel.secrets.jwtSecrets),
      sessions: new SessionService(keel),
      deferred: new Deferred(keel.log),
      limits: {
        login: keel.limits.define('login', c.LOGIN_LIMIT, c.LOGIN_WINDOW_SECONDS),
        loginIp: keel.limits.define('login-ip', c.LOGIN_IP_LIMIT, c.LOGIN_WINDOW_SECONDS),
        passwordReentry: keel.limits.define('password-reentry', c.PASSWORD_REENTRY_LIMIT, 900),
        register: keel.limits.define('register', c.REGISTER_LIMIT, 3600),
        registerPartner: keel.limits.define('register-partner', c.REGISTER_PARTNER_LIMIT, 3600),
        forgotPassword: keel.limits.define('forgot-password', c.FORGOT_PASSWORD_LIMIT, 3600),
      },
      ports,
      passwordPolicies: [],
      accountManagers: [],
      // One derived from each JWT secret (the first signs, every one verifies); the key is the hex text's bytes, as before.
      csrfKeys: keel.secrets.jwtSecrets.map((s) => secretKey(hmacSha256Hex(secretKey(s), 'keel:service_csrf:v1'))),
      profiles: new InvalidatedCache<SelfProfile>().listen(keel.invalidation, USER_TOPIC).listen(keel.invalidation, PROFILE_TOPIC),
    },
  };
}
