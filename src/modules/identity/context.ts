import type { Keel } from '../../keel.js';
import type { Limit } from '../../platform/rate-limit.js';
import { AccessTokens } from './tokens.js';
import { SessionService } from './sessions.js';
import { Deferred } from './deferred.js';

/** The identity module's per-process state: token keys, the session cache, its rate limits and queued work. */
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
}

const instances = new WeakMap<Keel, Identity>();

export function identityOf(keel: Keel): Identity {
  let identity = instances.get(keel);
  if (!identity) {
    const c = keel.config;
    identity = {
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
    };
    instances.set(keel, identity);
  }
  return identity;
}
