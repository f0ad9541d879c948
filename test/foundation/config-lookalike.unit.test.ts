/** A misspelt setting is named with the setting it resembles, instead of being silently ignored. */
import { describe, expect, it } from 'vitest';
import { lookalikeSettings } from '../../src/config.js';

describe('settings that look like Keel’s', () => {
  it('names each with the closest known setting: a missing letter, an extra one, two swapped', () => {
    expect(lookalikeSettings({ ALLOW_INSECURE_TARGET: 'true', SMTP_ULR: 'smtp://x', DATA_DIRR: '/d', REDIS_UR: 'redis://x' })).toEqual([
      { name: 'ALLOW_INSECURE_TARGET', closest: 'ALLOW_INSECURE_TARGETS' },
      { name: 'DATA_DIRR', closest: 'DATA_DIR' },
      { name: 'REDIS_UR', closest: 'REDIS_URL' },
      { name: 'SMTP_ULR', closest: 'SMTP_URL' },
    ]);
  });

  it('leaves known settings, the shell’s own variables and unrelated names alone', () => {
    expect(lookalikeSettings({ SMTP_URL: 'smtp://x', PORT: '3000', PATH: '/bin', HOME: '/root', HOSTNAME: 'h', LANG: 'C', TERM: 'xterm', NODE_OPTIONS: '', MY_APP_SETTING: '1' })).toEqual([]);
  });
});
