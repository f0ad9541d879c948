import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

function errorOf(env: Record<string, string>): string {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('config', () => {
  it('applies the documented defaults', () => {
    const c = loadConfig({});
    expect(c.PORT).toBe(3000);
    expect(c.HOST).toBe('127.0.0.1');
    expect(c.DATA_DIR).toBe('./data');
    expect(c.ENABLE_REGISTRATION).toBe(false);
    expect(c.ENABLE_2FA).toBe(true);
    expect(c.AUTO_MIGRATE).toBe(true);
    expect(c.WORKER).toBe('inline');
    expect(c.BINARY_SOURCE).toBe('remote');
    expect(c.publicUrl).toBe('http://localhost:3000');
    expect(c.serviceVersion).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('names the variable in one line for a bad value', () => {
    const msg = errorOf({ PORT: 'eighty' });
    expect(msg).toContain('PORT');
    expect(msg.split('\n')).toHaveLength(1);
    expect(errorOf({ ENABLE_REGISTRATION: 'maybe' })).toContain('ENABLE_REGISTRATION');
    expect(errorOf({ DATABASE_URL: 'mysql://x' })).toContain('DATABASE_URL');
    expect(errorOf({ WORKER: 'sometimes' })).toContain('WORKER');
  });

  it('never echoes a secret value in the error', () => {
    const msg = errorOf({ NODE_ENV: 'production', JWT_SECRET: 'x'.repeat(40), APP_ENCRYPTION_KEY: 'not-a-url', SMTP_URL: 'http://nope' });
    expect(msg).toContain('SMTP_URL');
    expect(msg).not.toContain('x'.repeat(40));
  });

  it('requires the secrets and refuses insecure targets in production', () => {
    expect(errorOf({ NODE_ENV: 'production', JWT_SECRET: 'j'.repeat(40) })).toContain('APP_ENCRYPTION_KEY');
    expect(errorOf({ NODE_ENV: 'production', APP_ENCRYPTION_KEY: 'a'.repeat(64) })).toContain('JWT_SECRET');
    expect(
      errorOf({ NODE_ENV: 'production', APP_ENCRYPTION_KEY: 'a'.repeat(64), JWT_SECRET: 'j'.repeat(40), ALLOW_INSECURE_TARGETS: 'true' }),
    ).toContain('ALLOW_INSECURE_TARGETS');
  });

  it('picks PUBLIC_URL over PUBLIC_APP_URL over DASHBOARD_URL', () => {
    expect(loadConfig({ DASHBOARD_URL: 'https://d.example', PUBLIC_APP_URL: 'https://a.example/' }).publicUrl).toBe('https://a.example');
    expect(loadConfig({ PUBLIC_URL: 'https://p.example', PUBLIC_APP_URL: 'https://a.example' }).publicUrl).toBe('https://p.example');
  });
});
