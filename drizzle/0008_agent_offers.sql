-- The updates Keel offered each device (one row per device, component and version): only a report of an
-- offered update counts towards its rollout, once per device, on the platform it was offered for.
CREATE TABLE "agent_offers" (
	"id" uuid PRIMARY KEY NOT NULL,
	"device_id" uuid NOT NULL,
	"component" varchar(20) NOT NULL,
	"version" varchar(64) NOT NULL,
	"os" varchar(50) NOT NULL,
	"arch" varchar(50) NOT NULL,
	"offered_at" timestamp with time zone DEFAULT now() NOT NULL,
	"outcome" varchar(20),
	"reported_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "agent_offers" ADD CONSTRAINT "agent_offers_device_id_devices_id_fk" FOREIGN KEY ("device_id") REFERENCES "public"."devices"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "agent_offers_device_idx" ON "agent_offers" USING btree ("device_id","component","version");--> statement-breakpoint
CREATE INDEX "agent_offers_rollout_idx" ON "agent_offers" USING btree ("component","version","os","arch");--> statement-breakpoint
-- The signed-in user the last session.login/session.logout events told, and when (one change told per window).
ALTER TABLE "devices" ADD COLUMN "logged_in_user_told" varchar(255);--> statement-breakpoint
ALTER TABLE "devices" ADD COLUMN "logged_in_user_event_at" timestamp with time zone;--> statement-breakpoint
UPDATE "devices" SET "logged_in_user_told" = "logged_in_user" WHERE "logged_in_user" IS NOT NULL;
