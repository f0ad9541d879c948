import { describe, expect, it } from 'vitest';
import { loggableError } from '../../src/platform/safe-error.js';

/** A node-postgres DatabaseError as the driver builds it (fields copied from a real unique violation). */
function pgError(message: string, fields: Record<string, unknown>): Error {
  return Object.assign(new Error(message), { name: 'error', severity: 'ERROR', routine: '_bt_check_unique', ...fields });
}

describe('loggableError', () => {
  it('keeps what names a driver error and drops the failing row, the key value and the parameters', () => {
    const err = pgError('duplicate key value violates unique constraint "users_email_lower"', {
      code: '23505',
      detail: 'Key (lower(email))=(ada@example.com) already exists.',
      constraint: 'users_email_lower',
      table: 'users',
      schema: 'public',
      where: 'SQL statement',
      query: 'insert into users (email, password_hash) values ($1, $2)',
      params: ['ada@example.com', '$argon2id$v=19$m=19456'],
    });
    const logged = loggableError(err);
    expect(logged).toMatchObject({ code: '23505', constraint: 'users_email_lower', table: 'users', schema: 'public', query: 'insert into users (email, password_hash) values ($1, $2)' });
    const text = JSON.stringify(logged);
    expect(text).not.toMatch(/ada@example\.com|argon2|Key \(|where/);
  });

  it("takes values out of PostgreSQL's message and drizzle's wrapper, and follows the cause", () => {
    const cause = pgError('invalid input syntax for type uuid: "s3cr3t-token"', { code: '22P02' });
    const wrapper = Object.assign(new Error('Failed query: select 1 where id = $1\nparams: s3cr3t-token'), {
      name: 'DrizzleQueryError',
      query: 'select 1 where id = $1',
      params: ['s3cr3t-token'],
      cause,
    });
    const logged = loggableError(wrapper);
    expect(logged).toMatchObject({ name: 'DrizzleQueryError', message: 'Failed query', query: 'select 1 where id = $1', cause: { code: '22P02', message: 'invalid input syntax for type uuid: "…"' } });
    expect(JSON.stringify(logged)).not.toContain('s3cr3t');
  });

  it('keeps an ordinary error whole, and copies no property it does not know', () => {
    const err = Object.assign(new Error('boom'), { code: 'E_THING', secret: 'hunter2' });
    const logged = loggableError(err);
    expect(logged).toMatchObject({ name: 'Error', message: 'boom', code: 'E_THING' });
    expect(logged.stack).toContain('boom');
    expect(JSON.stringify(logged)).not.toContain('hunter2');
    expect(loggableError('a string')).toEqual({ name: 'string', message: 'a string' });
  });
});
