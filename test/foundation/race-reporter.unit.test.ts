import { describe, expect, it } from 'vitest';
import type { TestModule } from 'vitest/node';
import { countRaces, raceSummary } from '../setup/race-reporter.js';

/** Just enough of vitest's reporter objects: a module of one project with named tests in suites. */
function mod(project: string, tests: { name: string; suite?: string; state: 'passed' | 'failed' | 'skipped' }[]): TestModule {
  const module = { type: 'module' };
  const cases = tests.map((t) => ({
    name: t.name,
    parent: t.suite ? { type: 'suite', name: t.suite, parent: module } : module,
    result: () => ({ state: t.state }),
  }));
  return { project: { name: project }, children: { allTests: () => cases[Symbol.iterator]() } } as unknown as TestModule;
}

describe('race reporter', () => {
  it('counts race tests (by name or suite) that ran and were skipped on the postgres project only', () => {
    const count = countRaces([
      mod('postgres', [
        { name: 'race: one winner', state: 'passed' },
        { name: 'ten refreshes', suite: 'race: sessions', state: 'failed' },
        { name: 'race: skipped one', state: 'skipped' },
        { name: 'an ordinary test mentioning race: later', state: 'passed' },
      ]),
      mod('pglite', [{ name: 'race: one winner', state: 'skipped' }]),
    ]);
    expect(count).toEqual({ ran: 2, failed: 1, skipped: 1, elsewhere: 1, postgresInRun: true });
    expect(raceSummary(count)).toContain('2 ran (1 passed, 1 failed), 1 skipped');
    expect(raceSummary(count)).toMatch(/^!!!/);
  });

  it('says plainly when all ran, and when the postgres project was not in the run', () => {
    expect(raceSummary({ ran: 3, failed: 0, skipped: 0, elsewhere: 3, postgresInRun: true })).toBe(
      'Race tests on a real PostgreSQL server: 3 ran (3 passed, 0 failed), 0 skipped.',
    );
    expect(raceSummary(countRaces([mod('pglite', [{ name: 'race: x', state: 'skipped' }])]))).toMatch(/not part of this run.*none ran on PostgreSQL/);
  });
});
