/**
 * A vitest reporter that ends every run with how many race tests ran on the real PostgreSQL server.
 *
 * A race test is one whose name, or the name of a suite around it, starts with `race:` (what
 * `raceTest` in test/helpers/race.ts registers). Races prove something only where transactions
 * interleave: on PGlite they are skipped, and without the PostgreSQL binaries (and without
 * REQUIRE_REAL_BACKENDS) the postgres project skips them too. Such a run must never pass for one
 * that proved the races, so the count is printed, loudly when none ran.
 */
import type { Reporter, TestCase, TestModule } from 'vitest/node';

const RACE = /^race:/i;

function isRace(test: TestCase): boolean {
  if (RACE.test(test.name)) return true;
  for (let parent = test.parent; parent.type === 'suite'; parent = parent.parent) {
    if (RACE.test(parent.name)) return true;
  }
  return false;
}

export interface RaceCount {
  /** Race tests that ran on the postgres project (passed or failed). */
  ran: number;
  failed: number;
  /** Race tests of the postgres project that were skipped. */
  skipped: number;
  /** Race tests seen in other projects (skipped there by design). */
  elsewhere: number;
  /** Whether the postgres project took part in this run at all. */
  postgresInRun: boolean;
}

export function countRaces(modules: readonly TestModule[]): RaceCount {
  const count: RaceCount = { ran: 0, failed: 0, skipped: 0, elsewhere: 0, postgresInRun: false };
  for (const mod of modules) {
    const onPostgres = mod.project.name === 'postgres';
    if (onPostgres) count.postgresInRun = true;
    for (const test of mod.children.allTests()) {
      if (!isRace(test)) continue;
      if (!onPostgres) {
        count.elsewhere++;
        continue;
      }
      const state = test.result().state;
      if (state === 'passed') count.ran++;
      else if (state === 'failed') {
        count.ran++;
        count.failed++;
      } else count.skipped++;
    }
  }
  return count;
}

export function raceSummary(c: RaceCount): string {
  if (!c.postgresInRun) {
    return `Race tests: the postgres project was not part of this run; ${c.elsewhere} race test(s) skipped elsewhere, none ran on PostgreSQL.`;
  }
  const line = `Race tests on a real PostgreSQL server: ${c.ran} ran (${c.ran - c.failed} passed, ${c.failed} failed), ${c.skipped} skipped.`;
  if (c.skipped === 0) return line;
  const bar = '!'.repeat(78);
  return [bar, `!!! ${line}`, '!!! Skipped race tests proved nothing: install postgresql + redis-server, or run with REQUIRE_REAL_BACKENDS=1.', bar].join('\n');
}

export default class RaceReporter implements Reporter {
  onTestRunEnd(testModules: readonly TestModule[]): void {
    process.stdout.write(`\n${raceSummary(countRaces(testModules))}\n`);
  }
}
