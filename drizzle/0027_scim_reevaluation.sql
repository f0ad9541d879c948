ALTER TABLE "scim_settings" ADD COLUMN "reevaluation_pending" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "scim_settings" ADD COLUMN "reevaluation_cursor" uuid;--> statement-breakpoint
ALTER TABLE "scim_settings" ADD COLUMN "reevaluation_by" uuid;--> statement-breakpoint
ALTER TABLE "scim_settings" ADD CONSTRAINT "scim_settings_reevaluation_by_users_id_fk" FOREIGN KEY ("reevaluation_by") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "scim_settings_reevaluation_idx" ON "scim_settings" USING btree ("org_id") WHERE "reevaluation_pending";
