/**
 * Proves the test harness itself: real PostgreSQL/Redis under the `postgres` project,
 * the local SMTP server under the `pglite` project.
 */
import nodemailer from 'nodemailer';
import pg from 'pg';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPgDatabase, flushRedis, realBackendsAvailable, redisUrl } from './helpers/backends.js';
import { startSmtpServer } from './helpers/smtp.js';
import { findBinaries } from './setup/real-backends.js';
import type { SmtpTestServer } from './helpers/smtp.js';

const underPostgres = process.env.KEEL_TEST_DB === 'postgres';
const underPglite = process.env.KEEL_TEST_DB === 'pglite';

describe.runIf(underPostgres)('real backends', () => {
  it('has started the real backends exactly when their binaries are installed (always under REQUIRE_REAL_BACKENDS)', () => {
    // A run that skips the postgres tests although the servers could have run must fail here, not pass quietly.
    const installed = 'binaries' in findBinaries();
    expect(realBackendsAvailable()).toBe(installed);
    if (process.env.REQUIRE_REAL_BACKENDS === '1') expect(realBackendsAvailable()).toBe(true);
  });

  describe.skipIf(!realBackendsAvailable())('available', () => {
    it('creates, uses and drops a fresh PostgreSQL database', async () => {
      const db = await createPgDatabase();
      expect(db.url).toMatch(/^postgres:\/\/postgres@127\.0\.0\.1:\d+\/keel_test_[0-9a-f]+$/);
      const client = new pg.Client({ connectionString: db.url });
      // drop() terminates this session; without a listener pg's 'error' event would be an uncaught exception.
      client.on('error', () => undefined);
      await client.connect();
      try {
        const { rows } = await client.query<{ version: string; db: string }>(
          'select version() as version, current_database() as db',
        );
        expect(rows[0]?.version).toMatch(/^PostgreSQL \d+/);
        expect(rows[0]?.db).toBe(db.name);
        await client.query('create table t (id int primary key)');
        await client.query('insert into t values (1), (2)');
        const count = await client.query<{ n: number }>('select count(*)::int as n from t');
        expect(count.rows[0]?.n).toBe(2);
      } finally {
        // Deliberately still connected: drop() must terminate the session itself.
        await db.drop();
        await client.end().catch(() => undefined);
      }

      const admin = new pg.Client({ connectionString: db.url.replace(/\/[^/]+$/, '/postgres') });
      await admin.connect();
      try {
        const left = await admin.query('select 1 from pg_database where datname = $1', [db.name]);
        expect(left.rowCount).toBe(0);
      } finally {
        await admin.end();
      }
    });

    it('gives parallel createPgDatabase() calls distinct databases', async () => {
      const dbs = await Promise.all([createPgDatabase(), createPgDatabase(), createPgDatabase()]);
      expect(new Set(dbs.map((d) => d.name)).size).toBe(3);
      await Promise.all(dbs.map((d) => d.drop()));
    });

    it('talks to Redis (SET/GET, flushRedis)', async () => {
      const redis = new Redis(redisUrl(), { lazyConnect: true });
      await redis.connect();
      try {
        expect(await redis.set('keel:harness', 'ok')).toBe('OK');
        expect(await redis.get('keel:harness')).toBe('ok');
        await flushRedis();
        expect(await redis.get('keel:harness')).toBeNull();
      } finally {
        redis.disconnect();
      }
    });
  });
});

describe.runIf(underPglite)('local SMTP server', () => {
  let smtp: SmtpTestServer;

  beforeAll(async () => {
    smtp = await startSmtpServer();
  });

  afterAll(async () => {
    await smtp.close();
  });

  it('receives a mail sent with nodemailer and extracts subject and URLs', async () => {
    const transport = nodemailer.createTransport(smtp.url);
    const link = 'https://keel.example.test/auth/reset?token=abc123&tenant=t%201';
    // Long line and '=' in the URL force quoted-printable soft line breaks and =3D escapes.
    const text = `Hello Älice,\n\nReset your password here: ${link}\n\n${'padding '.repeat(20)}\n`;
    try {
      await transport.sendMail({
        from: 'Keel <no-reply@keel.example.test>',
        to: 'alice@example.com',
        subject: 'Réinitialiser votre mot de passe',
        text,
        html: `<p>Reset: <a href="${link.replace(/&/g, '&amp;')}">link</a></p>`,
      });
    } finally {
      transport.close();
    }

    const mail = await smtp.waitFor((m) => m.to.includes('alice@example.com'));
    expect(mail.from).toBe('no-reply@keel.example.test');
    expect(mail.subject).toBe('Réinitialiser votre mot de passe');
    expect(mail.raw).toMatch(/=\r\n/); // the raw body really was soft-wrapped
    expect(mail.text.replace(/\r\n/g, '\n')).toBe(text);
    expect(mail.urls).toEqual([link]);
    expect(mail.html).toContain('href="https://keel.example.test/auth/reset?token=abc123&amp;tenant=t%201"');
  });

  it('waitFor rejects with a helpful message on timeout', async () => {
    await expect(smtp.waitFor((m) => m.to.includes('nobody@example.com'), 100)).rejects.toThrow(
      /No matching mail within 100 ms; 1 received/,
    );
  });
});
