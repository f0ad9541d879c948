import { domainToASCII } from 'node:url';
import { and, asc, count, eq, inArray, isNull, lt, or, sql, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { clock } from '../../platform/clock.js';
import { constantTimeEqual, randomToken } from '../../platform/crypto.js';
import { notFound, validationError } from '../../platform/http/errors.js';
import type { Limit } from '../../platform/rate-limit.js';
import { loggableError } from '../../platform/safe-error.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { createResolver, lookupTxt, type Domains, type TxtAnswer } from './dns.js';
import { intervalJob, type KeelModule } from '../../platform/module.js';
import { InvalidatedCache } from '../../platform/cache.js';
import { verifiedDomains, type DomainRow } from './schema.js';
import { domainsError } from './errors.js';

/** Whose domain: an organisation's (its partner named for the audit entry) or a partner's. */
export type DomainOwner = { kind: 'org'; orgId: string; partnerId: string | null } | { kind: 'partner'; partnerId: string };

export const TXT_PREFIX = 'keel-verification=';
/** A verified domain is looked up again once this much time has passed since its last check. */
export const RECHECK_AFTER_MS = 24 * 60 * 60_000;

export type DomainReason = 'txt_record_missing' | 'txt_record_mismatch' | 'dns_lookup_failed' | 'txt_record_removed';
const REASON_TEXT: Record<DomainReason, string> = {
  txt_record_missing: 'The domain has no TXT record: publish the txtRecord value as a TXT record at the domain, then verify again',
  txt_record_mismatch: 'None of the domain\'s TXT records is the txtRecord value: publish it exactly, then verify again',
  dns_lookup_failed: 'The DNS lookup got no answer: try again later',
  txt_record_removed: 'The daily check no longer found the TXT record: publish it again and verify',
};

export interface DomainView {
  id: string;
  orgId: string | null;
  partnerId: string | null;
  domain: string;
  status: 'pending' | 'verified';
  txtRecord: string;
  reason: DomainReason | null;
  reasonText: string | null;
  verifiedAt: string | null;
  checkedAt: string | null;
  lapsedAt: string | null;
  createdAt: string;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);

export function domainView(r: DomainRow): DomainView {
  const reason = (r.reason as DomainReason | null) ?? null;
  return {
    id: r.id,
    orgId: r.orgId,
    partnerId: r.partnerId,
    domain: r.domain,
    status: r.status,
    txtRecord: `${TXT_PREFIX}${r.token}`,
    reason,
    reasonText: reason ? REASON_TEXT[reason] : null,
    verifiedAt: iso(r.verifiedAt),
    checkedAt: iso(r.checkedAt),
    lapsedAt: iso(r.lapsedAt),
    createdAt: r.createdAt.toISOString(),
  };
}

/**
 * Suffixes under which anyone registers names: claiming one of them alone would claim every
 * customer's domain. Single-label names (`com`) are refused by the label count; this list covers the
 * common multi-label registries and shared hosting suffixes (a small list, not the Public Suffix List).
 */
const PUBLIC_SUFFIXES = new Set([
  'co.uk', 'org.uk', 'me.uk', 'ltd.uk', 'plc.uk', 'ac.uk', 'gov.uk', 'net.uk', 'sch.uk', 'nhs.uk',
  'com.au', 'net.au', 'org.au', 'edu.au', 'gov.au', 'co.nz', 'org.nz', 'net.nz', 'co.jp', 'ne.jp', 'or.jp', 'ac.jp',
  'com.br', 'net.br', 'org.br', 'com.cn', 'net.cn', 'org.cn', 'co.in', 'net.in', 'org.in', 'co.za', 'org.za',
  'com.mx', 'com.ar', 'com.tr', 'co.kr', 'com.sg', 'com.hk', 'com.tw', 'co.il', 'com.pl', 'co.id', 'com.my',
  'github.io', 'gitlab.io', 'herokuapp.com', 'azurewebsites.net', 'cloudfront.net', 'appspot.com', 'blogspot.com',
  'netlify.app', 'vercel.app', 'pages.dev', 'workers.dev', 'onmicrosoft.com', 'firebaseapp.com', 'web.app',
]);

/**
 * A domain as stored: IDNA (punycode) and lower case, no trailing dot; at least two labels of
 * letters, digits and inner hyphens (1-63 each, 253 in all), no wildcard, not a public suffix alone.
 * 400 naming `domain` otherwise.
 */
export function normaliseDomain(input: string): string {
  const bad = (message: string) => validationError([{ path: 'domain', message }]);
  const trimmed = input.trim().replace(/\.$/, '');
  if (trimmed.includes('*')) throw bad('must be a domain name without a wildcard');
  if (/[@/:\s]/.test(trimmed)) throw bad('must be a domain name only (no address, scheme, port or path)');
  const ascii = domainToASCII(trimmed).toLowerCase();
  if (!ascii || ascii.length > 253) throw bad('is not a valid domain name');
  const labels = ascii.split('.');
  if (labels.length < 2) throw bad('must have at least two labels (a public suffix such as "com" alone cannot be claimed)');
  if (!labels.every((l) => /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/.test(l))) throw bad('is not a valid domain name');
  if (/^\d+$/.test(labels[labels.length - 1] ?? '')) throw bad('must be a domain name, not an IP address');
  if (PUBLIC_SUFFIXES.has(ascii)) throw bad('is a public suffix: claim your own domain under it');
  return ascii;
}

/** The email's domain and each parent domain of two labels or more (a verified domain covers its subdomains). */
export function coveringDomains(email: string): string[] {
  const at = email.lastIndexOf('@');
  const host = domainToASCII(email.slice(at + 1).trim().replace(/\.$/, '')).toLowerCase();
  if (!host) return [];
  const labels = host.split('.');
  const out: string[] = [];
  for (let i = 0; i <= labels.length - 2; i++) out.push(labels.slice(i).join('.'));
  return out;
}

const ownerCondition = (owner: DomainOwner): SQL =>
  owner.kind === 'org' ? eq(verifiedDomains.orgId, owner.orgId) : and(eq(verifiedDomains.partnerId, owner.partnerId), isNull(verifiedDomains.orgId)) ?? sql`false`;

const auditScope = (owner: DomainOwner) => (owner.kind === 'org' ? { orgId: owner.orgId, partnerId: owner.partnerId } : { partnerId: owner.partnerId, orgId: null });

export async function listDomains(db: Db, owner: DomainOwner, q: { page: number; limit: number }): Promise<{ data: DomainView[]; total: number }> {
  const where = ownerCondition(owner);
  const [rows, [total]] = await Promise.all([
    db.select().from(verifiedDomains).where(where).orderBy(asc(verifiedDomains.domain), asc(verifiedDomains.id)).limit(q.limit).offset((q.page - 1) * q.limit),
    db.select({ n: count() }).from(verifiedDomains).where(where),
  ]);
  return { data: rows.map(domainView), total: total?.n ?? 0 };
}

const claimed = () => domainsError('domain_claimed');
const isUniqueViolation = (err: unknown, index?: string): boolean => {
  const e = err as { code?: unknown; constraint?: unknown; cause?: { code?: unknown; constraint?: unknown } };
  const code = e.code ?? e.cause?.code;
  const constraint = e.constraint ?? e.cause?.constraint;
  return code === '23505' && (index === undefined || constraint === undefined || constraint === index);
};

/** Another owner's verified row of exactly this domain, if any. */
async function verifiedElsewhere(db: Db, owner: DomainOwner, domain: string): Promise<DomainRow | null> {
  const [row] = await db.select().from(verifiedDomains).where(and(eq(verifiedDomains.domain, domain), eq(verifiedDomains.status, 'verified')));
  if (!row) return null;
  const mine = owner.kind === 'org' ? row.orgId === owner.orgId : row.orgId === null && row.partnerId === owner.partnerId;
  return mine ? null : row;
}

/** `POST …/domains`: a pending claim with a fresh token (256 random bits); 409 `domain_claimed` when verified elsewhere, `domain_exists` when already claimed here. */
export async function addDomain(keel: Keel, owner: DomainOwner, input: { domain: string }, createdBy: string | null, info: AuditRequestInfo): Promise<DomainView> {
  const domain = normaliseDomain(input.domain);
  if (await verifiedElsewhere(keel.db, owner, domain)) {
    await writeAudit(keel.db, info, { action: 'domain.create', ...auditScope(owner), details: { domain, refused: 'domain_claimed' }, result: 'failure' });
    throw claimed();
  }
  const now = clock.now();
  try {
    const row = await transaction(keel.db, async (tx) => {
      const [created] = await tx.db
        .insert(verifiedDomains)
        .values({
          orgId: owner.kind === 'org' ? owner.orgId : null,
          partnerId: owner.kind === 'partner' ? owner.partnerId : null,
          domain,
          status: 'pending',
          token: randomToken(32),
          createdBy,
          createdAt: now,
          updatedAt: now,
        })
        .returning();
      if (!created) throw new Error('verified_domains: insert returned no row');
      await writeAudit(tx.db, info, { action: 'domain.create', ...auditScope(owner), target: { type: 'domain', id: created.id }, details: { domain } });
      return created;
    });
    return domainView(row);
  } catch (err) {
    if (isUniqueViolation(err)) throw domainsError('domain_exists');
    throw err;
  }
}

async function findDomain(db: Db, owner: DomainOwner, id: string): Promise<DomainRow> {
  const [row] = await db.select().from(verifiedDomains).where(and(eq(verifiedDomains.id, id), ownerCondition(owner)));
  if (!row) throw notFound('Domain');
  return row;
}

/** Whether the lookup found `keel-verification=<token>` among the TXT records (each compared in constant time). */
export function recordMatches(answer: TxtAnswer, token: string): boolean {
  if (answer.kind !== 'records') return false;
  const expected = `${TXT_PREFIX}${token}`;
  let found = false;
  for (const value of answer.values) if (constantTimeEqual(value.trim(), expected)) found = true;
  return found;
}

const reasonOf = (answer: TxtAnswer): DomainReason =>
  answer.kind === 'none' ? 'txt_record_missing' : answer.kind === 'error' ? 'dns_lookup_failed' : 'txt_record_mismatch';

const verifyLimit = (keel: Keel): Limit => keel.modules.get('domains').verifyLimit;

/**
 * `POST …/domains/:id/verify`: looks the TXT records up now. Found: `verified` (409 `domain_claimed`
 * when another owner verified it first: the partial unique index decides under any concurrency).
 * Not found: stays (or, for a verified domain, goes back to) `pending` with the reason. Audited
 * either way. `DOMAIN_VERIFY_LIMIT` lookups per owner per minute (429).
 */
export async function verifyDomain(keel: Keel, owner: DomainOwner, id: string, info: AuditRequestInfo): Promise<DomainView> {
  const row = await findDomain(keel.db, owner, id);
  await verifyLimit(keel).consume(owner.kind === 'org' ? `org:${owner.orgId}` : `partner:${owner.partnerId}`);
  const answer = await lookupTxt(keel, row.domain);
  const ok = recordMatches(answer, row.token);
  const now = clock.now();
  const reason = ok ? null : reasonOf(answer);
  try {
    const updated = await transaction(keel.db, async (tx) => {
      const set = ok
        ? { status: 'verified' as const, reason: null, verifiedAt: row.status === 'verified' ? row.verifiedAt : now, checkedAt: now, lapsedAt: null, updatedAt: now }
        : { status: 'pending' as const, reason, checkedAt: now, updatedAt: now, ...(row.status === 'verified' ? { verifiedAt: null, lapsedAt: now } : {}) };
      const [u] = await tx.db.update(verifiedDomains).set(set).where(eq(verifiedDomains.id, row.id)).returning();
      if (!u) throw notFound('Domain');
      await writeAudit(tx.db, info, {
        action: 'domain.verify',
        ...auditScope(owner),
        target: { type: 'domain', id: row.id },
        details: { domain: row.domain, status: u.status, ...(reason ? { reason } : {}), ...(answer.kind === 'error' ? { dns: answer.code } : {}) },
        result: ok ? 'success' : 'failure',
      });
      return u;
    });
    await verifiedDomainsChanged(keel);
    return domainView(updated);
  } catch (err) {
    if (isUniqueViolation(err, 'verified_domains_one_verified_idx')) {
      await writeAudit(keel.db, info, { action: 'domain.verify', ...auditScope(owner), target: { type: 'domain', id: row.id }, details: { domain: row.domain, refused: 'domain_claimed' }, result: 'failure' });
      throw claimed();
    }
    throw err;
  }
}

/** `DELETE …/domains/:id`: the claim ends (a verified domain is free for others). */
export async function deleteDomain(keel: Keel, owner: DomainOwner, id: string, info: AuditRequestInfo): Promise<void> {
  const row = await findDomain(keel.db, owner, id);
  await transaction(keel.db, async (tx) => {
    await tx.db.delete(verifiedDomains).where(eq(verifiedDomains.id, row.id));
    await writeAudit(tx.db, info, { action: 'domain.delete', ...auditScope(owner), target: { type: 'domain', id: row.id }, details: { domain: row.domain, status: row.status } });
  });
  await verifiedDomainsChanged(keel);
}

/**
 * The daily re-check (run by the worker role's `domains.recheck` job, `installDomains`): every verified domain
 * last checked `RECHECK_AFTER_MS` ago or more is looked up again. Its claim on the row is a
 * conditional UPDATE of `checked_at`, so two workers never check one domain twice. A record that is
 * gone (the DNS answered without it) puts the domain back to `pending` with reason
 * `txt_record_removed` and `lapsedAt`, audited `domain.lapse` by the system; a lookup without an
 * answer keeps it verified (a DNS outage must not drop every organisation's domains) and is logged.
 * Answers how many domains lapsed.
 */
export async function recheckDomains(keel: Keel, batch = 100): Promise<{ checked: number; lapsed: number }> {
  const now = clock.now();
  const due = new Date(now.getTime() - RECHECK_AFTER_MS);
  const rows = await keel.db
    .select()
    .from(verifiedDomains)
    .where(and(eq(verifiedDomains.status, 'verified'), or(isNull(verifiedDomains.checkedAt), lt(verifiedDomains.checkedAt, due))))
    .orderBy(asc(verifiedDomains.checkedAt))
    .limit(batch);
  let checked = 0;
  let lapsed = 0;
  const system: AuditRequestInfo = { actor: { type: 'system' } };
  for (const row of rows) {
    const [claimedRow] = await keel.db
      .update(verifiedDomains)
      .set({ checkedAt: now })
      .where(and(eq(verifiedDomains.id, row.id), eq(verifiedDomains.status, 'verified'), row.checkedAt ? eq(verifiedDomains.checkedAt, row.checkedAt) : isNull(verifiedDomains.checkedAt)))
      .returning({ id: verifiedDomains.id });
    if (!claimedRow) continue;
    checked++;
    const answer = await lookupTxt(keel, row.domain);
    if (recordMatches(answer, row.token)) continue;
    if (answer.kind === 'error') {
      keel.log.warn({ domainId: row.id, domain: row.domain, dns: answer.code }, 'verified domain re-check: no DNS answer; the domain stays verified');
      continue;
    }
    await transaction(keel.db, async (tx) => {
      const [u] = await tx.db
        .update(verifiedDomains)
        .set({ status: 'pending', reason: 'txt_record_removed', verifiedAt: null, lapsedAt: now, updatedAt: now })
        .where(and(eq(verifiedDomains.id, row.id), eq(verifiedDomains.status, 'verified')))
        .returning({ id: verifiedDomains.id });
      if (!u) return;
      lapsed++;
      await writeAudit(tx.db, system, {
        action: 'domain.lapse',
        orgId: row.orgId,
        partnerId: row.partnerId,
        target: { type: 'domain', id: row.id },
        details: { domain: row.domain, reason: answer.kind === 'none' ? 'txt_record_missing' : 'txt_record_mismatch' },
        result: 'failure',
      });
    });
  }
  if (lapsed > 0) await verifiedDomainsChanged(keel);
  return { checked, lapsed };
}

/** How often the worker looks for domains due a re-check (each is re-checked once a day). */
export const RECHECK_TICK_MS = 15 * 60_000;

/**
 * Installs the domains module: its DNS resolver, and the re-check job of the worker role (a pass every
 * RECHECK_TICK_MS; a failed pass is logged and the next tick tries again).
 */
export function installDomains(keel: Keel): KeelModule<Domains> {
  return {
    handle: {
      resolver: createResolver(keel),
      verifyLimit: keel.limits.define('domain-verify', keel.config.DOMAIN_VERIFY_LIMIT, 60),
      verifiedOrgs: new InvalidatedCache<string | null>({ max: 50_000 }).listen(keel.invalidation, VERIFIED_DOMAINS_TOPIC, () => '*'),
    },
    jobs: [
      intervalJob({
        name: 'domains.recheck',
        roles: ['worker'],
        everyMs: RECHECK_TICK_MS,
        run: async () => {
          const { checked, lapsed } = await recheckDomains(keel);
          if (checked > 0) keel.log.info({ checked, lapsed }, 'verified domains re-checked');
        },
        failed: (err) => keel.log.error({ error: loggableError(err) }, 'verified domain re-check failed'),
      }),
    ],
  };
}

/**
 * The SSO rule of verified domains (docs/decisions.md "Verified domains and SSO step-up"), asked before an email is
 * provisioned or linked by a provider of `owner`. Answers null when allowed, else the reason:
 * 1. the most specific verified domain covering the email belongs to another organisation or partner;
 * 2. the owner has verified domains and none covers the email;
 * 3. the IdP said `email_verified: false` for an existing account and no domain of the owner covers it.
 * An owner without verified domains keeps the earlier behaviour (only rule 1 and 3 can refuse).
 */
export async function ssoEmailRefusal(db: Db, owner: DomainOwner, email: string, opts: { existingAccount: boolean; emailVerified: unknown }): Promise<string | null> {
  const candidates = coveringDomains(email);
  if (candidates.length === 0) return 'email has no domain';
  const rows = await db
    .select({ domain: verifiedDomains.domain, orgId: verifiedDomains.orgId, partnerId: verifiedDomains.partnerId })
    .from(verifiedDomains)
    .where(and(eq(verifiedDomains.status, 'verified'), or(inArray(verifiedDomains.domain, candidates), ownerCondition(owner))));
  const mine = (r: { orgId: string | null; partnerId: string | null }) => (owner.kind === 'org' ? r.orgId === owner.orgId : r.orgId === null && r.partnerId === owner.partnerId);
  // candidates run from the most specific domain to the least.
  const covering = candidates.map((d) => rows.find((r) => r.domain === d)).find((r) => r !== undefined);
  if (covering && !mine(covering)) return `the email domain is verified by another ${covering.orgId ? 'organization' : 'partner'}`;
  const ownCount = rows.filter(mine).length;
  if (ownCount > 0 && !covering) return 'the email domain is not one of the verified domains';
  if (opts.existingAccount && opts.emailVerified === false && !covering) return 'the IdP did not verify the email and its domain is not verified here';
  return null;
}

/**
 * The owner of the most specific verified domain covering the email's domain (the domain itself, else
 * its nearest parent of two labels or more): an organisation or a partner; null when none. The one
 * domain lookup of sign-in discovery (docs/decisions.md "Sign-in options"): it reads domains only,
 * never accounts.
 */
export async function verifiedDomainOwner(db: Db, email: string): Promise<{ domain: string; orgId: string | null; partnerId: string | null } | null> {
  const candidates = coveringDomains(email);
  if (candidates.length === 0) return null;
  const rows = await db
    .select({ domain: verifiedDomains.domain, orgId: verifiedDomains.orgId, partnerId: verifiedDomains.partnerId })
    .from(verifiedDomains)
    .where(and(eq(verifiedDomains.status, 'verified'), inArray(verifiedDomains.domain, candidates)));
  return candidates.map((d) => rows.find((r) => r.domain === d)).find((r) => r !== undefined) ?? null;
}

/**
 * Invalidation topic of the verified domains (any message drops every process's `verifiedOrgs`):
 * published after every write that can change which domains are verified (verify, delete, lapse).
 */
export const VERIFIED_DOMAINS_TOPIC = 'domains.verified';

async function verifiedDomainsChanged(keel: Keel): Promise<void> {
  await keel.invalidation.publish(VERIFIED_DOMAINS_TOPIC, '*');
}

/**
 * `verifiedDomainOrg` from a per-process cache keyed by the email's domain, dropped on every process
 * when a domain is verified, deleted or lapses (docs/decisions.md "Speed: logins"): every password
 * sign-in asks it (enforced SSO), and domains change rarely.
 */
export function cachedVerifiedDomainOrg(keel: Keel, email: string): Promise<string | null> {
  const [host] = coveringDomains(email);
  if (host === undefined) return Promise.resolve(null);
  return keel.modules.get('domains').verifiedOrgs.get(host, () => verifiedDomainOrg(keel.db, email));
}

/** The organisation whose verified domain (the most specific one) covers this email, or null (none, or a partner's). */
const VERIFIED_DOMAIN_OWNERS = prepared('verified_domain_owners', `select domain, org_id as "orgId" from verified_domains where status = 'verified' and domain = any($1::text[])`);

export async function verifiedDomainOrg(db: Db, email: string): Promise<string | null> {
  const candidates = coveringDomains(email);
  if (candidates.length === 0) return null;
  // Prepared: every SCIM `POST /Users` and SSO sign-in asks it (docs/decisions.md "SCIM at scale").
  const rows = await rawQuery<{ domain: string; orgId: string }>(db, VERIFIED_DOMAIN_OWNERS, [candidates]);
  const covering = candidates.map((d) => rows.find((r) => r.domain === d)).find((r) => r !== undefined);
  return covering?.orgId ?? null;
}
