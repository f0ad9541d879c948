-- Partner-wide webhooks and replay (docs/decisions.md "Webhook replay and partner-wide webhooks").
-- A webhook belongs to exactly one of an organisation or a partner; a partner's webhooks are found by
-- the routing statement through their own index. Deliveries and payloads of a partner webhook's test
-- and operational events carry no organisation.
ALTER TABLE "webhooks" ALTER COLUMN "org_id" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "webhooks" ADD COLUMN "partner_id" uuid;--> statement-breakpoint
ALTER TABLE "webhooks" ADD CONSTRAINT "webhooks_partner_id_partners_id_fk" FOREIGN KEY ("partner_id") REFERENCES "public"."partners"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhooks" ADD CONSTRAINT "webhooks_one_owner" CHECK (("org_id" IS NULL) <> ("partner_id" IS NULL));--> statement-breakpoint
CREATE INDEX "webhooks_partner_idx" ON "webhooks" USING btree ("partner_id","status") WHERE "partner_id" IS NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ALTER COLUMN "org_id" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_payloads" ALTER COLUMN "org_id" DROP NOT NULL;--> statement-breakpoint
-- The event store a replay reads: an event's type on its payload (null for test deliveries' bodies).
ALTER TABLE "webhook_payloads" ADD COLUMN "event_type" varchar(100);--> statement-breakpoint
UPDATE "webhook_payloads" SET "event_type" = "body"->>'type' WHERE ("body"->>'test') IS NULL;--> statement-breakpoint
CREATE INDEX "webhook_payloads_org_created_idx" ON "webhook_payloads" USING btree ("org_id","created_at") WHERE "event_type" IS NOT NULL;--> statement-breakpoint
CREATE TABLE "webhook_replays" (
	"id" uuid PRIMARY KEY NOT NULL,
	"webhook_id" uuid NOT NULL,
	"since" timestamp with time zone NOT NULL,
	"until" timestamp with time zone NOT NULL,
	"event_types" jsonb,
	"status" varchar(20) DEFAULT 'running' NOT NULL,
	"total" integer NOT NULL,
	"sent" integer DEFAULT 0 NOT NULL,
	"cursor_at" timestamp with time zone,
	"cursor_id" uuid,
	"error" text,
	"created_by" uuid,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone
);--> statement-breakpoint
ALTER TABLE "webhook_replays" ADD CONSTRAINT "webhook_replays_webhook_id_webhooks_id_fk" FOREIGN KEY ("webhook_id") REFERENCES "public"."webhooks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_replays_running_idx" ON "webhook_replays" USING btree ("webhook_id") WHERE "status" = 'running';--> statement-breakpoint
CREATE INDEX "webhook_replays_webhook_idx" ON "webhook_replays" USING btree ("webhook_id","created_at");
