import type { PlatformVariables } from './platform/http/middleware.js';
import type { Principal } from './modules/identity/principal.js';

/** Per-request values every route can read with `c.get(...)`. */
export interface AppVariables extends PlatformVariables {
  /** Set by the authenticate middleware on protected routes. */
  principal: Principal;
}

export interface AppEnv {
  Variables: AppVariables;
}
