CREATE TABLE "agent_releases" (
	"id" uuid PRIMARY KEY NOT NULL,
	"version" varchar(64) NOT NULL,
	"component" varchar(20) NOT NULL,
	"os" varchar(50) NOT NULL,
	"arch" varchar(50) NOT NULL,
	"url" text,
	"sha256" varchar(64) NOT NULL,
	"size" bigint NOT NULL,
	"file_path" text,
	"source" varchar(10) NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "agent_targets" (
	"id" uuid PRIMARY KEY NOT NULL,
	"component" varchar(20) NOT NULL,
	"os" varchar(50) NOT NULL,
	"arch" varchar(50) NOT NULL,
	"version" varchar(64) NOT NULL,
	"rollout_percent" integer DEFAULT 100 NOT NULL,
	"rollout_status" varchar(20) DEFAULT 'active' NOT NULL,
	"promoted_at" timestamp with time zone DEFAULT now() NOT NULL,
	"reports_since" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "agent_update_reports" (
	"id" uuid PRIMARY KEY NOT NULL,
	"device_id" uuid NOT NULL,
	"component" varchar(20) NOT NULL,
	"from_version" varchar(64),
	"to_version" varchar(64) NOT NULL,
	"state" varchar(20) NOT NULL,
	"error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "agent_update_settings" (
	"id" uuid PRIMARY KEY NOT NULL,
	"owner_type" varchar(10) NOT NULL,
	"owner_id" uuid NOT NULL,
	"maintenance_window" jsonb,
	"pinned_versions" jsonb,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "enrollment_keys" (
	"id" uuid PRIMARY KEY NOT NULL,
	"org_id" uuid NOT NULL,
	"name" varchar(255),
	"key_hash" varchar(64) NOT NULL,
	"site_id" uuid,
	"device_group_id" uuid,
	"expires_at" timestamp with time zone,
	"revoked_at" timestamp with time zone,
	"created_by" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "token_hash" varchar(64);--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "components" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "auto_update" boolean DEFAULT true NOT NULL;--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "logged_in_user" varchar(255);--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "update_started_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "update_component" varchar(20);--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "update_to_version" varchar(64);--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "update_now" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "enrolled_with_key_id" uuid;--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "decommissioned_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "agent_update_reports" ADD CONSTRAINT "agent_update_reports_device_id_devices_id_fk" FOREIGN KEY ("device_id") REFERENCES "public"."devices"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "enrollment_keys" ADD CONSTRAINT "enrollment_keys_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "enrollment_keys" ADD CONSTRAINT "enrollment_keys_site_id_sites_id_fk" FOREIGN KEY ("site_id") REFERENCES "public"."sites"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "enrollment_keys" ADD CONSTRAINT "enrollment_keys_device_group_id_device_groups_id_fk" FOREIGN KEY ("device_group_id") REFERENCES "public"."device_groups"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "agent_releases_build_idx" ON "agent_releases" USING btree ("version","component","os","arch");--> statement-breakpoint
CREATE UNIQUE INDEX "agent_targets_platform_idx" ON "agent_targets" USING btree ("component","os","arch");--> statement-breakpoint
CREATE INDEX "agent_update_reports_version_idx" ON "agent_update_reports" USING btree ("component","to_version","state");--> statement-breakpoint
CREATE UNIQUE INDEX "agent_update_settings_owner_idx" ON "agent_update_settings" USING btree ("owner_type","owner_id");--> statement-breakpoint
CREATE UNIQUE INDEX "enrollment_keys_hash_idx" ON "enrollment_keys" USING btree ("key_hash");--> statement-breakpoint
CREATE INDEX "enrollment_keys_org_idx" ON "enrollment_keys" USING btree ("org_id");--> statement-breakpoint
CREATE UNIQUE INDEX "devices_token_hash_idx" ON "devices" USING btree ("token_hash");--> statement-breakpoint
CREATE INDEX "devices_status_seen_idx" ON "devices" USING btree ("status","last_seen_at");