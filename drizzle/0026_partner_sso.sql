-- Partner-level SSO (docs/decisions.md "Partner-level SSO"). A partner carries a unique lowercase
-- slug (its sign-in page /login/<slug>); existing partners get one derived from their name, with a
-- suffix from their id where two names give the same slug.
ALTER TABLE "partners" ADD COLUMN "slug" varchar(63);--> statement-breakpoint
WITH "base" AS (
	SELECT "id", "created_at",
		coalesce(nullif(trim(both '-' from left(trim(both '-' from regexp_replace(lower("name"), '[^a-z0-9]+', '-', 'g')), 50)), ''), 'partner') AS "b"
	FROM "partners"
), "numbered" AS (
	SELECT "id", "b", row_number() OVER (PARTITION BY "b" ORDER BY "created_at", "id") AS "n" FROM "base"
)
UPDATE "partners" SET "slug" = CASE WHEN "numbered"."n" = 1 THEN "numbered"."b" ELSE "numbered"."b" || '-' || right(replace("partners"."id"::text, '-', ''), 8) END
FROM "numbered" WHERE "partners"."id" = "numbered"."id";--> statement-breakpoint
ALTER TABLE "partners" ALTER COLUMN "slug" SET NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "partners_slug_idx" ON "partners" USING btree ("slug");--> statement-breakpoint
-- A provider belongs to exactly one of an organisation or a partner; at most one active per partner.
ALTER TABLE "sso_providers" ALTER COLUMN "org_id" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD COLUMN "partner_id" uuid;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_partner_id_partners_id_fk" FOREIGN KEY ("partner_id") REFERENCES "public"."partners"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_one_owner" CHECK (("org_id" IS NULL) <> ("partner_id" IS NULL));--> statement-breakpoint
CREATE INDEX "sso_providers_partner_idx" ON "sso_providers" USING btree ("partner_id") WHERE "partner_id" IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "sso_providers_one_active_partner_idx" ON "sso_providers" USING btree ("partner_id") WHERE status = 'active' AND "partner_id" IS NOT NULL;--> statement-breakpoint
-- What a partner provider gives a technician it provisions: orgAccess and its organisation list, and
-- the partner members who keep password sign-in under enforceSSO (break-glass).
ALTER TABLE "sso_providers" ADD COLUMN "org_access" "org_access" DEFAULT 'all' NOT NULL;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD COLUMN "org_ids" uuid[] DEFAULT '{}'::uuid[] NOT NULL;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD COLUMN "break_glass_user_ids" uuid[] DEFAULT '{}'::uuid[] NOT NULL;
