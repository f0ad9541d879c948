import type { Keel } from '../../keel.js';
import type { Limit } from '../../platform/rate-limit.js';
import { AccessTokens } from './tokens.js';
import { SessionService } from './sessions.js';

/** The identity module's per-process state: token keys, the session cache, and its rate limits. */
export interface Identity {
  tokens: AccessTokens;
  sessions: SessionService;
  limits: {
    login: Limit;
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
      limits: {
        login: keel.limits.define('login', c.LOGIN_LIMIT, c.LOGIN_WINDOW_SECONDS),
        register: keel.limits.define('register', c.REGISTER_LIMIT, 3600),
        registerPartner: keel.limits.define('register-partner', c.REGISTER_PARTNER_LIMIT, 3600),
        forgotPassword: keel.limits.define('forgot-password', c.FORGOT_PASSWORD_LIMIT, 3600),
      },
    };
    instances.set(keel, identity);
  }
  return identity;
}
