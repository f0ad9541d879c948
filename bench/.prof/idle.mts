import { readFileSync } from 'node:fs';
import { benchEnv, startKeel, startPostgres } from '../lib.js';
import { fleetEnv, setUpFleet, heartbeatLoad } from '../fleet.js';
const admin = { email: 'ab-admin@example.com', password: 'correct-horse-battery-admin-staple' };
const pg = process.env.BACKEND === 'postgres' ? await startPostgres() : null;
let env: Record<string, string> = {};
let db: { url: string; drop(): Promise<void> } | null = null;
if (pg) { db = await pg.createDatabase(); env = { DATABASE_URL: db.url, REDIS_URL: pg.redisUrl ?? '' }; }
const keel = await startKeel(benchEnv({ ...fleetEnv(admin), ...env }));
const pid = keel.proc.child.pid!;
const ticks = () => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' '); return Number(f[11]) + Number(f[12]); };
const n = Number(process.env.DEVICES ?? 10000);
const { tokens } = await setUpFleet(keel.url, admin, n, 'idle');
const sample = async (label: string, secs: number) => { const out: number[] = []; for (let i = 0; i < secs; i++) { const a = ticks(); await new Promise((r) => setTimeout(r, 1000)); out.push(ticks() - a); } console.log(label, out.join(' ')); };
await sample('idle after setup (ticks of 10 ms per s):', 30);
for (let i = 0; i < 4; i++) { const a = ticks(); const r = await heartbeatLoad(`${keel.url}/api/v1/agents/heartbeat`, tokens, 6); const t = ticks() - a; console.log(`load ${i}: ${Math.round(r.requests.average)} req/s, ${(t * 10000 / r.requests.total).toFixed(1)} µs/req`); }
await sample('idle after load:', 10);
await keel.stop(); await db?.drop(); await pg?.stop();
