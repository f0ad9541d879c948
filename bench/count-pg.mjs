// Preloaded into Keel by bench/publish.ts (`--import`): counts the statements Keel sends to
// PostgreSQL (each `pg` query is one round trip) and writes the count to PG_COUNT_FILE on SIGUSR2.
import { writeFileSync } from 'node:fs';
import pg from 'pg';

let count = 0;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function counted(...args) {
  count++;
  return query.apply(this, args);
};
process.on('SIGUSR2', () => {
  if (process.env.PG_COUNT_FILE) writeFileSync(process.env.PG_COUNT_FILE, String(count));
});
