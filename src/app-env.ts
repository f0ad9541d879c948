import type { PlatformVariables } from './platform/http/middleware.js';
import type { Principal } from './modules/identity/principal.js';
import type { AccessContext } from './modules/access/scope.js';
import type { AccessSummary } from './modules/access/service.js';

/** Per-request values every route can read with `c.get(...)`. */
export interface AppVariables extends PlatformVariables {
  /** Set by the authenticate middleware on protected routes. */
  principal: Principal;
  /** Set by the access module's requireScope middleware: scope, acting organisation, effective permissions. */
  access: AccessContext;
  /**
   * Optional: a user's access summary already computed earlier in this request (the Force MFA gate
   * in authenticate); requireScope reuses it instead of reading the association again.
   */
  accessSummary: AccessSummary | undefined;
}

export interface AppEnv {
  Variables: AppVariables;
}
