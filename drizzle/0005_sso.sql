CREATE TYPE "public"."sso_provider_status" AS ENUM('inactive', 'testing', 'active');--> statement-breakpoint
CREATE TYPE "public"."sso_provider_type" AS ENUM('oidc', 'saml');--> statement-breakpoint
CREATE TABLE "sso_identities" (
	"id" uuid PRIMARY KEY NOT NULL,
	"user_id" uuid NOT NULL,
	"provider_id" uuid NOT NULL,
	"external_id" varchar(255) NOT NULL,
	"email" varchar(255) NOT NULL,
	"profile" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"access_token" text,
	"refresh_token" text,
	"token_expires_at" timestamp with time zone,
	"last_login_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sso_providers" (
	"id" uuid PRIMARY KEY NOT NULL,
	"org_id" uuid NOT NULL,
	"name" varchar(255) NOT NULL,
	"type" "sso_provider_type" NOT NULL,
	"status" "sso_provider_status" DEFAULT 'inactive' NOT NULL,
	"preset" varchar(100),
	"issuer" varchar(500),
	"client_id" varchar(255),
	"client_secret" text,
	"authorization_url" varchar(500),
	"token_url" varchar(500),
	"user_info_url" varchar(500),
	"jwks_url" varchar(500),
	"scopes" varchar(500) NOT NULL,
	"attribute_mapping" jsonb NOT NULL,
	"auto_provision" boolean DEFAULT true NOT NULL,
	"default_role_id" uuid,
	"allowed_domains" varchar(1000) DEFAULT '' NOT NULL,
	"enforce_sso" boolean DEFAULT false NOT NULL,
	"entity_id" varchar(500),
	"sso_url" varchar(500),
	"certificate" text,
	"group_role_mappings" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"created_by" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "sso_identities" ADD CONSTRAINT "sso_identities_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_identities" ADD CONSTRAINT "sso_identities_provider_id_sso_providers_id_fk" FOREIGN KEY ("provider_id") REFERENCES "public"."sso_providers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_default_role_id_roles_id_fk" FOREIGN KEY ("default_role_id") REFERENCES "public"."roles"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sso_providers" ADD CONSTRAINT "sso_providers_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "sso_identities_provider_external_idx" ON "sso_identities" USING btree ("provider_id","external_id");--> statement-breakpoint
CREATE UNIQUE INDEX "sso_identities_provider_user_idx" ON "sso_identities" USING btree ("provider_id","user_id");--> statement-breakpoint
CREATE INDEX "sso_identities_user_idx" ON "sso_identities" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "sso_providers_org_idx" ON "sso_providers" USING btree ("org_id");--> statement-breakpoint
CREATE UNIQUE INDEX "sso_providers_one_active_idx" ON "sso_providers" USING btree ("org_id") WHERE status = 'active';