CREATE INDEX "organization_users_role_idx" ON "organization_users" USING btree ("role_id");--> statement-breakpoint
CREATE INDEX "partner_users_role_idx" ON "partner_users" USING btree ("role_id");