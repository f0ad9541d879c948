import { expect } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';
import { ROLE } from '../access/helpers.js';
import { webhooksOf } from '../../src/modules/webhooks/runtime.js';

export interface WebhookWorld extends Tenant {
  /** Organisation Admin of orgId. */
  admin: string;
  /** Organisation Admin of otherOrgId (same partner). */
  otherAdmin: string;
  /** An API key of orgId's admin holding events:publish. */
  eventsKey: string;
}

export async function createWebhookWorld(app: TestApp): Promise<WebhookWorld> {
  const tenant = await createTenant(app);
  const other = await createUser(app, { name: 'Other Org Admin', org: { orgId: tenant.otherOrgId, roleId: ROLE.orgAdmin } });
  const admin = (await login(app, tenant.orgAdmin)).accessToken;
  const otherAdmin = (await login(app, other)).accessToken;
  const key = await app.api('POST', '/api-keys', { token: admin, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } });
  expect(key.status).toBe(201);
  return { ...tenant, admin, otherAdmin, eventsKey: key.body.key as string };
}

export async function createHook(app: TestApp, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await app.api('POST', '/webhooks', { token, body: { name: 'hook', events: ['alert.triggered'], ...body } });
  if (res.status !== 201) throw new Error(`webhook create failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

export async function publish(app: TestApp, key: string, type: string, data: Record<string, unknown> = {}, orgId?: string): Promise<any> {
  const res = await app.api('POST', '/events', { token: key, body: { type, data, ...(orgId ? { orgId } : {}) } });
  if (res.status !== 202) throw new Error(`publish failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Waits until `check` holds for the webhook's deliveries (polling the API, which is what a client sees). */
export async function deliveriesUntil(
  app: TestApp,
  token: string,
  webhookId: string,
  check: (deliveries: any[]) => boolean,
  timeoutMs = 20_000,
): Promise<any[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await app.api('GET', `/webhooks/${webhookId}/deliveries?limit=100`, { token });
    expect(res.status).toBe(200);
    if (check(res.body.data)) return res.body.data;
    if (Date.now() > deadline) throw new Error(`deliveries never matched: ${JSON.stringify(res.body.data).slice(0, 2000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export const engineOf = (app: TestApp) => webhooksOf(app.server.keel).engine;
