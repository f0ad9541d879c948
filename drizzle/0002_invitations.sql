CREATE TABLE "invitations" (
	"id" uuid PRIMARY KEY NOT NULL,
	"user_id" uuid NOT NULL,
	"email" varchar(255) NOT NULL,
	"scope" "role_scope" NOT NULL,
	"partner_id" uuid,
	"org_id" uuid,
	"role_id" uuid,
	"org_access" "org_access",
	"org_ids" uuid[],
	"site_ids" uuid[],
	"device_group_ids" uuid[],
	"invited_by" uuid,
	"token_hash" varchar(64) NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_partner_id_partners_id_fk" FOREIGN KEY ("partner_id") REFERENCES "public"."partners"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_role_id_roles_id_fk" FOREIGN KEY ("role_id") REFERENCES "public"."roles"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invitations" ADD CONSTRAINT "invitations_invited_by_users_id_fk" FOREIGN KEY ("invited_by") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "invitations_token_hash_idx" ON "invitations" USING btree ("token_hash");--> statement-breakpoint
CREATE INDEX "invitations_user_idx" ON "invitations" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "invitations_partner_idx" ON "invitations" USING btree ("partner_id");--> statement-breakpoint
CREATE INDEX "invitations_org_idx" ON "invitations" USING btree ("org_id");--> statement-breakpoint
CREATE INDEX "invitations_role_idx" ON "invitations" USING btree ("role_id");--> statement-breakpoint
-- Pending invitations kept until now in single_use_records (purpose 'invite', token hashed the same
-- way) move here with their grant, so links already sent keep working. A record without a grant
-- (a link resent after the first one had expired) is dropped: the administrator resends it.
INSERT INTO "invitations" ("id", "user_id", "email", "scope", "partner_id", "org_id", "role_id", "org_access", "org_ids", "site_ids", "device_group_ids", "invited_by", "token_hash", "expires_at", "created_at")
SELECT s."id", u."id", u."email", (s."data"->'grant'->>'kind')::"role_scope", p."id", o."id", r."id",
  CASE WHEN s."data"->'grant'->>'kind' = 'partner' THEN coalesce(s."data"->'grant'->>'orgAccess', 'none')::"org_access" END,
  CASE WHEN s."data"->'grant'->>'kind' = 'partner'
    THEN ARRAY(SELECT jsonb_array_elements_text(coalesce(s."data"->'grant'->'orgIds', '[]'::jsonb))::uuid) END,
  CASE WHEN jsonb_typeof(s."data"->'grant'->'siteIds') = 'array'
    THEN ARRAY(SELECT jsonb_array_elements_text(s."data"->'grant'->'siteIds')::uuid) END,
  CASE WHEN jsonb_typeof(s."data"->'grant'->'deviceGroupIds') = 'array'
    THEN ARRAY(SELECT jsonb_array_elements_text(s."data"->'grant'->'deviceGroupIds')::uuid) END,
  iu."id", s."token_hash", s."expires_at", s."created_at"
FROM "single_use_records" s
JOIN "users" u ON u."id" = s."subject_id"
LEFT JOIN "partners" p ON p."id"::text = s."data"->'grant'->>'partnerId'
LEFT JOIN "organizations" o ON o."id"::text = s."data"->'grant'->>'orgId'
LEFT JOIN "roles" r ON r."id"::text = s."data"->'grant'->>'roleId'
LEFT JOIN "users" iu ON iu."id"::text = s."data"->>'invitedBy'
WHERE s."purpose" = 'invite' AND s."data"->'grant'->>'kind' IN ('partner', 'organization');--> statement-breakpoint
DELETE FROM "single_use_records" WHERE "purpose" = 'invite';
