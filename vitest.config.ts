import { defineConfig } from 'vitest/config';

/**
 * Two projects run the same tests against two database backends:
 *
 * - `pglite`:   in-process PGlite (KEEL_TEST_DB=pglite). Runs everything, incl. *.unit.test.ts.
 * - `postgres`: one real PostgreSQL + one real Redis server for the whole run, started by
 *               test/setup/real-backends.ts (KEEL_TEST_DB=postgres). Pure unit tests
 *               (*.unit.test.ts) are not repeated here. If the binaries are missing the
 *               dependent tests are skipped with a loud warning, unless REQUIRE_REAL_BACKENDS=1.
 *
 * Select one with `npx vitest run --project pglite` (or `--project postgres`).
 */
// Every test lives under test/ (docs/testing.md "Layout and running"; test/foundation/layers.unit.test.ts
// fails on a test file under src/).
const include = ['test/**/*.test.ts'];
const exclude = ['**/node_modules/**', 'bench/**', '**/dist/**'];

export default defineConfig({
  test: {
    pool: 'forks',
    // The default output, then the count of race tests that ran on PostgreSQL (test/helpers/race.ts).
    reporters: ['default', './test/setup/race-reporter.ts'],
    // The CI machine has 2 cores; this caps the workers shared by both projects.
    maxWorkers: 2,
    // No test resolves or connects outside loopback (docs/testing.md "Network").
    setupFiles: ['test/setup/loopback-guard.ts'],
    // Caps for a hung test, not time rules (docs/testing.md "Waiting"): a loaded laptop must still pass.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    // Room for the globalSetup teardown (PostgreSQL fast shutdown).
    teardownTimeout: 30_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'pglite',
          include,
          exclude,
          env: { KEEL_TEST_DB: 'pglite' },
        },
      },
      {
        extends: true,
        test: {
          name: 'postgres',
          include,
          exclude: [...exclude, '**/*.unit.test.ts'],
          globalSetup: ['test/setup/real-backends.ts'],
          env: { KEEL_TEST_DB: 'postgres' },
        },
      },
    ],
  },
});
