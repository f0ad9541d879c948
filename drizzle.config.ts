import { defineConfig } from 'drizzle-kit';

// Migrations are generated from the module schemas and committed; Keel's own runner applies them
// (src/platform/db/migrator.ts), recording each file's SHA-256.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/platform/db/schema.ts', './src/modules/*/schema.ts'],
  out: './drizzle',
});
