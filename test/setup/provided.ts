/**
 * Values handed from the `postgres` project's globalSetup (test/setup/real-backends.ts)
 * to test files via vitest's `project.provide()` / `inject()`.
 *
 * Empty strings mean "real backends unavailable" (the binaries were not found and
 * REQUIRE_REAL_BACKENDS was not set); tests depending on them should skip.
 * In the `pglite` project there is no globalSetup and `inject()` returns undefined.
 */
export interface KeelProvidedContext {
  /** postgres://postgres@127.0.0.1:PORT/postgres (superuser, trust auth), or ''. */
  pgUrl: string;
  /** redis://127.0.0.1:PORT, or ''. */
  redisUrl: string;
}

/**
 * Number of Redis logical databases the test server is started with. Each vitest worker
 * uses database VITEST_POOL_ID (1..maxWorkers) so parallel test files do not collide.
 */
export const REDIS_DATABASES = 64;

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: KeelProvidedContext['pgUrl'];
    redisUrl: KeelProvidedContext['redisUrl'];
  }
}
