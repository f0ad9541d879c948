/**
 * docs/security.md "Findings", 9 and 13, "Also checked" (MFA at accept), and invitation expiry on the clock (the
 * accept race on PostgreSQL): an invitation is a record of its own (grant, inviter, expiry, token
 * hash) that can be listed and revoked, is re-validated when accepted, is replaced by a re-invite,
 * whose resends are limited, and whose answer reveals nothing about an account that existed.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { createUser, enrollTotp, login, nextTotpStep, STRONG_PASSWORD, totpCode, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { behindLock, expectOneWinner, raceTest, together } from '../helpers/race.js';
import { createWorld, insertRole, orgUserWithRole, ROLE, type World } from '../access/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { users } from '../../src/modules/identity/schema.js';
import { signIn } from '../../src/modules/identity/service.js';
import { createOrganization } from '../../src/modules/tenancy/service.js';

const DAY = 24 * 3600_000;

describe.skipIf(!backendAvailable())('invitations', () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  let w: World;
  const db = () => app.server.keel.db;

  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({
      env: { SMTP_URL: smtp.url, LOGIN_LIMIT: '1000', PUBLIC_URL: 'https://keel.example.com', INVITE_RESENDS_PER_INVITER_LIMIT: '4' },
    });
    w = await createWorld(app);
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
  });
  afterEach(() => clock.reset());

  /** The token of the newest invitation email to `email` (taken off the list). */
  async function inviteLink(email: string): Promise<string> {
    const mail = await smtp.waitFor((m) => m.to.includes(email) && m.subject.includes('invited'));
    smtp.messages.splice(smtp.messages.indexOf(mail), 1);
    const url = mail.urls.find((u) => u.includes('/accept-invite?token='));
    return new URL(url!).searchParams.get('token')!;
  }
  const mailsTo = (email: string) => smtp.messages.filter((m) => m.to.includes(email)).length;
  const invite = (token: string, body: Record<string, unknown>) => app.api('POST', '/users/invite', { token, body });
  const accept = (body: Record<string, unknown>, token?: string) => app.api('POST', '/auth/accept-invite', { body, ...(token ? { token } : {}) });
  const invitationsOf = async (token: string, query = '') => {
    const res = await app.api('GET', `/users/invitations?limit=100${query}`, { token });
    expect(res.status).toBe(200);
    return res.body.data as Record<string, any>[];
  };
  /** An account with no association (self-registered, or removed from its last organisation). */
  const loner = (name = 'Loner') => createUser(app, { name });
  const scopeOf = async (user: TestUser) => (await login(app, user)).body.user.scope;

  it('D9: inviting an existing unaffiliated account answers exactly like inviting a new one', async () => {
    const account = await loner('Secret Name');
    await login(app, account); // sets lastLoginAt
    await db().update(users).set({ mfaEnabled: true, mfaMethod: 'totp', avatarUrl: 'https://cdn.example.com/me.png' }).where(eq(users.id, account.id));
    const [row] = await db().select().from(users).where(eq(users.id, account.id));

    const fresh = await invite(w.tokens.orgAdmin, { email: uniqueEmail('fresh'), name: 'Typed Name', roleId: ROLE.orgReadOnly });
    const known = await invite(w.tokens.orgAdmin, { email: account.email, name: 'Typed Name', roleId: ROLE.orgReadOnly });
    expect(fresh.status).toBe(201);
    expect(known.status).toBe(201);
    expect(Object.keys(known.body).sort()).toEqual(Object.keys(fresh.body).sort());
    const { id: _a, email: _b, createdAt: _c, ...freshRest } = fresh.body;
    const { id, email, createdAt, ...knownRest } = known.body;
    expect(knownRest).toEqual(freshRest);
    expect(knownRest).toMatchObject({ name: 'Typed Name', status: 'invited', lastLoginAt: null, mfaEnabled: false, mfaMethod: null, avatarUrl: null });
    expect(email).toBe(account.email);
    // Neither its id (a UUIDv7 carries its creation time) nor its creation date nor its name.
    expect(id).not.toBe(account.id);
    expect(createdAt).not.toBe(row!.createdAt.toISOString());
    expect(Date.parse(createdAt)).toBeGreaterThanOrEqual(row!.lastLoginAt!.getTime());
    const text = JSON.stringify(known.body);
    expect(text).not.toContain('Secret Name');
    expect(text).not.toContain(account.id);
    // The listing and the audit log name the invitation, not the account.
    const listed = (await invitationsOf(w.tokens.orgAdmin)).find((i) => i.id === id);
    expect(listed).toMatchObject({ userId: null, email: account.email, status: 'pending' });
    const audit = await app.api('GET', `/audit-logs?action=user.invite&targetId=${id}`, { token: w.tokens.orgAdmin });
    expect(audit.body.data).toHaveLength(1);
    expect(JSON.stringify(audit.body.data)).not.toContain(account.id);
    // A disabled account is not told apart either; it cannot accept.
    const off = await createUser(app, { name: 'Off', status: 'disabled' });
    const offInvite = await invite(w.tokens.orgAdmin, { email: off.email, name: 'Typed Name', roleId: ROLE.orgReadOnly });
    expect(offInvite.status).toBe(201);
    expect(Object.keys(offInvite.body).sort()).toEqual(Object.keys(fresh.body).sort());
    const offAccept = await accept({ token: await inviteLink(off.email), password: off.password });
    expect(offAccept.status).toBe(400);
    expect(offAccept.body.code).toBe('invalid_token');
  });

  it('GET /users/invitations lists the scope’s invitations, {data, pagination}; another organisation sees none of them', async () => {
    const org = await createOrganization(db(), { name: 'Listing', partnerId: w.partnerId });
    const admin = await orgUserWithRole(app, org.id, ROLE.orgAdmin);
    const newEmail = uniqueEmail('new');
    const created = await invite(admin.token, { email: newEmail, name: 'New', roleId: ROLE.orgTechnician });
    const existing = await loner();
    const joined = await invite(admin.token, { email: existing.email, name: 'Old', roleId: ROLE.orgReadOnly });
    const res = await app.api('GET', '/users/invitations?limit=1', { token: admin.token });
    expect(res.status).toBe(200);
    expect(res.body.pagination).toEqual({ page: 1, limit: 1, total: 2 });
    expect(res.body.data).toHaveLength(1);
    const all = await invitationsOf(admin.token);
    expect(all.map((i) => i.id)).toEqual([joined.body.id, expect.any(String)]); // newest first
    const forNew = all.find((i) => i.userId === created.body.id)!;
    expect(forNew).toMatchObject({
      email: newEmail, scope: 'organization', orgId: org.id, partnerId: null, roleId: ROLE.orgTechnician, orgAccess: null, orgIds: [],
      siteIds: null, deviceGroupIds: null, invitedBy: admin.user.id, status: 'pending',
    });
    expect(Date.parse(forNew.expiresAt) - Date.parse(forNew.createdAt)).toBe(7 * DAY);
    expect(all.find((i) => i.id === joined.body.id)).toMatchObject({ userId: null, email: existing.email, roleId: ROLE.orgReadOnly });

    const others = await invitationsOf(w.tokens.orgAdmin);
    expect(others.some((i) => i.orgId === org.id)).toBe(false);
    // The partner's administrator sees the partner-level invitations and those of its organisations; an organisation sees no partner-level one.
    const partnerLevel = await invite(w.tokens.partnerFull, { email: uniqueEmail('partner'), name: 'P', roleId: ROLE.partnerTechnician, orgAccess: 'all' });
    expect(partnerLevel.status).toBe(201);
    const partnerView = await invitationsOf(w.tokens.partnerFull);
    expect(partnerView.map((i) => i.id)).toEqual(expect.arrayContaining([joined.body.id, forNew.id]));
    expect(partnerView.find((i) => i.userId === partnerLevel.body.id)).toMatchObject({ scope: 'partner', partnerId: w.partnerId, orgId: null, orgAccess: 'all' });
    expect(others.some((i) => i.scope === 'partner')).toBe(false);
    expect((await invitationsOf(admin.token)).some((i) => i.scope === 'partner')).toBe(false);
    expect((await app.api('DELETE', `/users/invitations/${forNew.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect((await app.api('GET', '/users/invitations', { token: w.tokens.orgTechnician })).status).toBe(403);
    const otherAdmin = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
    expect((await app.api('DELETE', `/users/invitations/${forNew.id}`, { token: otherAdmin.token })).status).toBe(404); // another organisation's
  });

  it('revokes an invitation of an existing account and of a new one; the links stop working; audited', async () => {
    const existing = await loner();
    const a = await invite(w.tokens.orgAdmin, { email: existing.email, name: 'E', roleId: ROLE.orgReadOnly });
    const existingLink = await inviteLink(existing.email);
    const newEmail = uniqueEmail('revoked');
    const b = await invite(w.tokens.orgAdmin, { email: newEmail, name: 'N', roleId: ROLE.orgReadOnly });
    const newLink = await inviteLink(newEmail);
    const list = await invitationsOf(w.tokens.orgAdmin);
    const forNew = list.find((i) => i.userId === b.body.id)!;

    const denied = await app.api('DELETE', `/users/invitations/${a.body.id}`, { token: w.tokens.orgReadOnly });
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('permission_denied');
    expect((await app.api('DELETE', `/users/invitations/${a.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    expect((await app.api('DELETE', `/users/invitations/${forNew.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    expect((await app.api('DELETE', `/users/invitations/${forNew.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);

    const left = (await invitationsOf(w.tokens.orgAdmin)).map((i) => i.id);
    expect(left).not.toContain(a.body.id);
    expect(left).not.toContain(forNew.id);
    for (const [token, password] of [[existingLink, existing.password], [newLink, STRONG_PASSWORD]]) {
      const res = await accept({ token, password });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('invalid_token');
    }
    expect(await scopeOf(existing)).toBeNull();
    // The account the invitation created, never used, left the organisation with it.
    expect((await app.api('GET', `/users/${b.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    const audit = await app.api('GET', '/audit-logs?action=user.invite.revoke&limit=100', { token: w.tokens.orgAdmin });
    expect(audit.status).toBe(200);
    const entries = audit.body.data.map((e: any) => ({ type: e.targetType ?? e.target?.type, id: e.targetId ?? e.target?.id }));
    expect(entries).toEqual(expect.arrayContaining([{ type: 'invitation', id: a.body.id }, { type: 'user', id: b.body.id }]));
  });

  it('a disabled invitee gets no new link (409 user_disabled) and cannot accept the old one', async () => {
    const email = uniqueEmail('disabled');
    const created = await invite(w.tokens.orgAdmin, { email, name: 'D', roleId: ROLE.orgReadOnly });
    const link = await inviteLink(email);
    expect((await app.api('PATCH', `/users/${created.body.id}`, { token: w.tokens.orgAdmin, body: { status: 'disabled' } })).status).toBe(200);
    const resend = await app.api('POST', '/users/resend-invite', { token: w.tokens.orgAdmin, body: { userId: created.body.id } });
    expect(resend.status).toBe(409);
    expect(resend.body.code).toBe('user_disabled');
    expect(mailsTo(email)).toBe(0);
    const res = await accept({ token: link, password: STRONG_PASSWORD });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_token');
  });

  it('a re-invite replaces the earlier invitation of the same organisation; accepting ends the account’s other invitations', async () => {
    const account = await loner();
    await invite(w.tokens.orgAdmin, { email: account.email, name: 'A', roleId: ROLE.orgTechnician });
    const first = await inviteLink(account.email);
    const again = await invite(w.tokens.orgAdmin, { email: account.email, name: 'A', roleId: ROLE.orgReadOnly });
    expect(again.status).toBe(201);
    const second = await inviteLink(account.email);
    const otherAdmin = await orgUserWithRole(app, w.otherOrgId, ROLE.orgAdmin);
    await invite(otherAdmin.token, { email: account.email, name: 'B', roleId: ROLE.orgReadOnly });
    const fromOther = await inviteLink(account.email);
    // One invitation per organisation: org A's second replaced its first, org B's stands beside it.
    expect((await invitationsOf(w.tokens.orgAdmin)).filter((i) => i.email === account.email)).toHaveLength(1);
    expect((await invitationsOf(otherAdmin.token)).filter((i) => i.email === account.email)).toHaveLength(1);

    expect((await accept({ token: first, password: account.password })).body.code).toBe('invalid_token');
    const ok = await accept({ token: second, password: account.password });
    expect(ok.status).toBe(200);
    expect(ok.body.user).toMatchObject({ scope: 'organization', orgId: w.orgId, roleId: ROLE.orgReadOnly });
    const late = await accept({ token: fromOther, password: account.password });
    expect(late.status).toBe(400);
    expect((await invitationsOf(otherAdmin.token)).filter((i) => i.email === account.email)).toHaveLength(0);
  });

  it('an invitee removed before accepting and invited again gets the membership on accept', async () => {
    const email = uniqueEmail('removed');
    const first = await invite(w.tokens.orgAdmin, { email, name: 'Rem', roleId: ROLE.orgTechnician });
    await inviteLink(email);
    expect((await app.api('DELETE', `/users/${first.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    expect(await invitationsOf(w.tokens.orgAdmin).then((l) => l.filter((i) => i.email === email))).toHaveLength(0);
    const again = await invite(w.tokens.orgAdmin, { email, name: 'Rem', roleId: ROLE.orgReadOnly });
    expect(again.status).toBe(201);
    const res = await accept({ token: await inviteLink(email), password: STRONG_PASSWORD, name: 'Rem Back' });
    expect(res.status).toBe(200);
    expect(res.body.user).toMatchObject({ scope: 'organization', orgId: w.orgId, roleId: ROLE.orgReadOnly, status: 'active', name: 'Rem Back' });
    expect((await app.api('GET', `/users/${first.body.id}`, { token: w.tokens.orgAdmin })).body).toMatchObject({ status: 'active', roleId: ROLE.orgReadOnly });
  });

  it('accepting after the role was deleted is 409 invitation_invalid (not a 500), and the account does not join', async () => {
    const role = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Short Lived', perms: ['devices:read'] });
    const account = await loner();
    expect((await invite(w.tokens.orgAdmin, { email: account.email, name: 'R', roleId: role })).status).toBe(201);
    const token = await inviteLink(account.email);
    expect((await app.api('DELETE', `/roles/${role}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const res = await accept({ token, password: account.password });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ code: 'invitation_invalid', details: { reason: 'role_unavailable' } });
    expect(await scopeOf(account)).toBeNull();
    // The answer stays the same on a second try: the invitation was not used up.
    expect((await accept({ token, password: account.password })).body.code).toBe('invitation_invalid');
  });

  it('accepting after the inviter lost access is 409; a resend by an administrator makes it valid again', async () => {
    const inviter = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
    const account = await loner();
    expect((await invite(inviter.token, { email: account.email, name: 'I', roleId: ROLE.orgTechnician })).status).toBe(201);
    const token = await inviteLink(account.email);
    expect((await app.api('DELETE', `/users/${inviter.user.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const res = await accept({ token, password: account.password });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ code: 'invitation_invalid', details: { reason: 'inviter_lacks_access' } });
    expect(await scopeOf(account)).toBeNull();

    const invitation = (await invitationsOf(w.tokens.orgAdmin)).find((i) => i.email === account.email)!;
    expect(invitation.invitedBy).toBe(inviter.user.id);
    const resender = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
    expect((await app.api('POST', '/users/resend-invite', { token: resender.token, body: { userId: invitation.id } })).status).toBe(200);
    const renewed = (await invitationsOf(w.tokens.orgAdmin)).find((i) => i.id === invitation.id)!;
    expect(renewed.invitedBy).toBe(resender.user.id);
    expect((await accept({ token, password: account.password })).status).toBe(400); // the old link is replaced
    const ok = await accept({ token: await inviteLink(account.email), password: account.password });
    expect(ok.status).toBe(200);
    expect(ok.body.user).toMatchObject({ orgId: w.orgId, roleId: ROLE.orgTechnician });
  });

  it('accepting after the organisation or a named site was deleted is 409 invitation_invalid', async () => {
    const org = await createOrganization(db(), { name: 'Doomed', partnerId: w.partnerId });
    const admin = await orgUserWithRole(app, org.id, ROLE.orgAdmin);
    const account = await loner();
    const newEmail = uniqueEmail('doomed');
    expect((await invite(admin.token, { email: account.email, name: 'E', roleId: ROLE.orgReadOnly })).status).toBe(201);
    expect((await invite(admin.token, { email: newEmail, name: 'N', roleId: ROLE.orgReadOnly })).status).toBe(201);
    const existingLink = await inviteLink(account.email);
    const newLink = await inviteLink(newEmail);
    expect((await app.api('DELETE', `/orgs/${org.id}`, { token: w.tokens.platformAdmin })).status).toBe(204);
    for (const [token, password] of [[existingLink, account.password], [newLink, STRONG_PASSWORD]]) {
      const res = await accept({ token, password });
      expect(res.status).toBe(409);
      expect(res.body).toMatchObject({ code: 'invitation_invalid', details: { reason: 'organization_deleted' } });
    }
    expect((await app.api('POST', '/auth/login', { body: { email: newEmail, password: STRONG_PASSWORD } })).status).toBe(401);

    const site = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'Branch' } });
    expect(site.status).toBe(201);
    const restricted = await loner();
    expect((await invite(w.tokens.orgAdmin, { email: restricted.email, name: 'S', roleId: ROLE.orgReadOnly, siteIds: [site.body.id] })).status).toBe(201);
    const siteLink = await inviteLink(restricted.email);
    expect((await app.api('DELETE', `/sites/${site.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const res = await accept({ token: siteLink, password: restricted.password });
    expect(res.status).toBe(409);
    expect(res.body.details.reason).toBe('restrictions_changed');
  });

  it('invitation emails are limited per invitee (invites, re-invites, resends): 429 with retryAfter, no email', async () => {
    const email = uniqueEmail('limited');
    const created = await invite(w.tokens.orgAdmin, { email, name: 'L', roleId: ROLE.orgReadOnly });
    expect(created.status).toBe(201);
    // Two resenders with 2 resends each, so the per-inviter limit (4) is not what stops the fifth.
    const admins = [await orgUserWithRole(app, w.orgId, ROLE.orgAdmin), await orgUserWithRole(app, w.orgId, ROLE.orgAdmin)];
    for (let i = 0; i < 4; i++) {
      const res = await app.api('POST', '/users/resend-invite', { token: admins[i % 2]!.token, body: { userId: created.body.id } });
      expect(res.status).toBe(200);
    }
    await smtp.waitFor(() => mailsTo(email) === 5);
    const over = await app.api('POST', '/users/resend-invite', { token: (await orgUserWithRole(app, w.orgId, ROLE.orgAdmin)).token, body: { userId: created.body.id } });
    expect(over.status).toBe(429);
    expect(over.body.retryAfter).toBeGreaterThan(0);
    expect(mailsTo(email)).toBe(5); // the answer comes after the send: a sixth mail would be here already

    const account = await loner();
    for (let i = 0; i < 5; i++) expect((await invite(w.tokens.orgAdmin, { email: account.email, name: 'R', roleId: ROLE.orgReadOnly })).status).toBe(201);
    const sixth = await invite(w.tokens.orgAdmin, { email: account.email.toUpperCase(), name: 'R', roleId: ROLE.orgReadOnly });
    expect(sixth.status).toBe(429);
    expect(mailsTo(account.email)).toBe(5);
  });

  it('resends are limited per inviter (INVITE_RESENDS_PER_INVITER_LIMIT=4 here)', async () => {
    const inviter = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await invite(inviter.token, { email: uniqueEmail('bulk'), name: `B${i}`, roleId: ROLE.orgReadOnly });
      expect(res.status).toBe(201); // invites themselves are not resends
      ids.push(res.body.id);
    }
    const statuses: number[] = [];
    for (const id of ids) statuses.push((await app.api('POST', '/users/resend-invite', { token: inviter.token, body: { userId: id } })).status);
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
    // Another administrator is not held back by this one's budget.
    const other = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
    expect((await app.api('POST', '/users/resend-invite', { token: other.token, body: { userId: ids[4] } })).status).toBe(200);
  });

  it('a link works for 7 days on the clock, then is 400; the listing says expired; a resend renews it', async () => {
    const early = uniqueEmail('early');
    const late = uniqueEmail('late');
    const lateInvite = await invite(w.tokens.orgAdmin, { email: late, name: 'Late', roleId: ROLE.orgReadOnly });
    await invite(w.tokens.orgAdmin, { email: early, name: 'Early', roleId: ROLE.orgReadOnly });
    const earlyLink = await inviteLink(early);
    const lateLink = await inviteLink(late);
    try {
      clock.advance(7 * DAY - 60_000);
      expect((await accept({ token: earlyLink, password: STRONG_PASSWORD })).status).toBe(200);
      clock.advance(2 * 60_000);
      const expired = await accept({ token: lateLink, password: STRONG_PASSWORD });
      expect(expired.status).toBe(400);
      expect(expired.body.code).toBe('invalid_token');
      const admin = await createUser(app, { org: { orgId: w.orgId, roleId: ROLE.orgAdmin } });
      const adminToken = (await login(app, admin)).accessToken;
      const listed = (await invitationsOf(adminToken)).find((i) => i.userId === lateInvite.body.id);
      expect(listed?.status).toBe('expired');
      expect((await app.api('POST', '/users/resend-invite', { token: adminToken, body: { userId: lateInvite.body.id } })).status).toBe(200);
      const renewed = await accept({ token: await inviteLink(late), password: STRONG_PASSWORD });
      expect(renewed.status).toBe(200);
    } finally {
      clock.reset();
    }
  });

  it('an existing account with MFA joins only after its second factor, then accepting signed in', async () => {
    const account = await loner();
    const first = await login(app, account);
    const { secret } = await enrollTotp(app, first.accessToken);
    const someoneElse = await loner();
    await invite(w.tokens.orgAdmin, { email: account.email, name: 'M', roleId: ROLE.orgTechnician });
    const token = await inviteLink(account.email);
    const member = async () => (await app.api('GET', `/users?search=${encodeURIComponent(account.email)}`, { token: w.tokens.orgAdmin })).body.data;

    // The password alone answers the login challenge; the account has not joined.
    const challenge = await accept({ token, password: account.password });
    expect(challenge.status).toBe(200);
    expect(challenge.body).toMatchObject({ mfaRequired: true, mfaMethod: 'totp' });
    expect(challenge.body.accessToken).toBeUndefined();
    expect(await member()).toEqual([]);

    // A session without the second factor (say, one from before enrolment) is not enough.
    const [row] = await db().select().from(users).where(eq(users.id, account.id));
    const passwordOnly = await signIn(app.server.keel, row!, { ip: '127.0.0.1', userAgent: 'test', actor: { type: 'user', id: account.id, email: account.email } }, { mfa: false, method: 'password' });
    const weak = await accept({ token }, passwordOnly.accessToken);
    expect(weak.status).toBe(403);
    expect(weak.body.code).toBe('mfa_required');
    // Nor another account's session.
    const other = await accept({ token }, (await login(app, someoneElse)).accessToken);
    expect(other.status).toBe(403);
    expect(other.body.code).toBe('invitation_other_account');
    expect(await member()).toEqual([]);

    await nextTotpStep();
    const verified = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: await totpCode(secret) } });
    expect(verified.status).toBe(200);
    expect(verified.body.user.scope).toBeNull(); // signed in, still not a member
    expect(await member()).toEqual([]);

    const joined = await accept({ token }, verified.body.accessToken);
    expect(joined.status).toBe(200);
    expect(joined.body).toMatchObject({ message: expect.any(String), user: { id: account.id, scope: 'organization', orgId: w.orgId, roleId: ROLE.orgTechnician } });
    expect(joined.body.accessToken).toBeUndefined(); // no new session: its own one now carries the membership
    expect((await app.api('GET', '/auth/me', { token: verified.body.accessToken })).body).toMatchObject({ scope: 'organization', orgId: w.orgId });
    expect((await member()).map((u: { id: string }) => u.id)).toEqual([account.id]);
    expect((await accept({ token }, verified.body.accessToken)).status).toBe(400);
  });

  raceTest('one of 10 parallel accepts of one link wins; the others are 400 invalid_token', async () => {
    const email = uniqueEmail('race');
    const created = await invite(w.tokens.orgAdmin, { email, name: 'Race', roleId: ROLE.orgReadOnly });
    const token = await inviteLink(email);
    const answers = await together(10, (i) => accept({ token, password: `${STRONG_PASSWORD}-${i}` }));
    const winner = expectOneWinner(answers, 200, [400]);
    for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe('invalid_token');
    // The account has the winner's password and no other.
    const i = answers.indexOf(winner);
    expect((await app.api('POST', '/auth/login', { body: { email, password: `${STRONG_PASSWORD}-${i}` } })).status).toBe(200);
    expect((await app.api('POST', '/auth/login', { body: { email, password: `${STRONG_PASSWORD}-${(i + 1) % 10}` } })).status).toBe(401);
    expect((await app.api('GET', `/users/${created.body.id}`, { token: w.tokens.orgAdmin })).body.status).toBe('active');
  });

  // The interleaving the race above may or may not hit, made certain: the accept reads the
  // invitation, the account becomes active and the invitation is consumed (what a winner commits),
  // and only then does the accept read the account. It must not check its password as the account's
  // current one (a 401 that counts toward lockout); it is 400 invalid_token like every loser.
  raceTest('an accept whose account is activated by a parallel winner mid-request is 400 invalid_token', async () => {
    const email = uniqueEmail('interleave');
    await invite(w.tokens.orgAdmin, { email, name: 'Interleave', roleId: ROLE.orgReadOnly });
    const token = await inviteLink(email);
    const answer = await behindLock(
      app.server.keel.config.DATABASE_URL!,
      'lock table users in access exclusive mode', // the accept's read of the account waits here
      1,
      () => accept({ token, password: `${STRONG_PASSWORD}-late` }),
      async (winner) => {
        await winner.query(`update users set status = 'active', password_hash = 'x' where email = $1`, [email]);
        await winner.query(`delete from invitations where user_id = (select id from users where email = $1)`, [email]);
      },
    );
    expect(answer.status).toBe(400);
    expect(answer.body.code).toBe('invalid_token');
  });

  raceTest('an account accepting a partner and an organisation invitation at once joins exactly one', async () => {
    for (let round = 0; round < 5; round++) {
      const account = await loner();
      expect((await invite(w.tokens.partnerFull, { email: account.email, name: 'P', roleId: ROLE.partnerTechnician, orgAccess: 'all' })).status).toBe(201);
      const partnerLink = await inviteLink(account.email);
      expect((await invite(w.tokens.orgAdmin, { email: account.email, name: 'O', roleId: ROLE.orgReadOnly })).status).toBe(201);
      const orgLink = await inviteLink(account.email);
      const session = (await login(app, account)).accessToken;
      const answers = await Promise.all([accept({ token: partnerLink }, session), accept({ token: orgLink }, session)]);
      expectOneWinner(answers, 200, [400, 409]);
      const me = (await app.api('GET', '/auth/me', { token: session })).body;
      const rows = await app.server.keel.database.query<{ n: number }>(
        'select (select count(*) from partner_users where user_id = $1) + (select count(*) from organization_users where user_id = $1) as n',
        [account.id],
      );
      expect(Number(rows[0]?.n)).toBe(1);
      expect(['partner', 'organization']).toContain(me.scope);
    }
  });
});
