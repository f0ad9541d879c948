-- The heartbeat's batched last-seen write changes no indexed column of devices: each row is updated in
-- place (HOT) in the room fillfactor 80 keeps free in every page. (The snapshot of this migration also
-- corrects the name the earlier snapshots gave webhook_deliveries_webhook_due_idx; the SQL was right.)
DROP INDEX "devices_status_seen_idx";--> statement-breakpoint
CREATE INDEX "devices_live_idx" ON "devices" USING btree ("status") WHERE "devices"."status" in ('online', 'updating') and "devices"."decommissioned_at" is null;--> statement-breakpoint
ALTER TABLE "devices" SET (fillfactor = 80);
