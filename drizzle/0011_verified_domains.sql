CREATE TABLE "verified_domains" (
	"id" uuid PRIMARY KEY NOT NULL,
	"org_id" uuid,
	"partner_id" uuid,
	"domain" varchar(253) NOT NULL,
	"status" varchar(16) DEFAULT 'pending' NOT NULL,
	"token" varchar(64) NOT NULL,
	"reason" varchar(200),
	"verified_at" timestamp with time zone,
	"checked_at" timestamp with time zone,
	"lapsed_at" timestamp with time zone,
	"created_by" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "verified_domains_one_owner" CHECK ((org_id IS NULL) <> (partner_id IS NULL)),
	CONSTRAINT "verified_domains_status" CHECK (status IN ('pending', 'verified'))
);
--> statement-breakpoint
ALTER TABLE "verified_domains" ADD CONSTRAINT "verified_domains_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "verified_domains" ADD CONSTRAINT "verified_domains_partner_id_partners_id_fk" FOREIGN KEY ("partner_id") REFERENCES "public"."partners"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "verified_domains" ADD CONSTRAINT "verified_domains_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "verified_domains_one_verified_idx" ON "verified_domains" USING btree ("domain") WHERE status = 'verified';--> statement-breakpoint
CREATE UNIQUE INDEX "verified_domains_org_domain_idx" ON "verified_domains" USING btree ("org_id","domain") WHERE org_id IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "verified_domains_partner_domain_idx" ON "verified_domains" USING btree ("partner_id","domain") WHERE partner_id IS NOT NULL;--> statement-breakpoint
CREATE INDEX "verified_domains_due_idx" ON "verified_domains" USING btree ("checked_at") WHERE status = 'verified';--> statement-breakpoint
ALTER TABLE "sso_providers" ADD COLUMN "mfa_acr_values" jsonb DEFAULT '[]'::jsonb NOT NULL;
