CREATE TABLE "scim_groups" (
	"id" uuid PRIMARY KEY NOT NULL,
	"org_id" uuid NOT NULL,
	"display_name" varchar(255) NOT NULL,
	"external_id" varchar(255),
	"version" integer DEFAULT 1 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "scim_groups" ADD CONSTRAINT "scim_groups_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "scim_groups_org_display_name_idx" ON "scim_groups" USING btree ("org_id",lower("display_name"));--> statement-breakpoint
CREATE INDEX "scim_groups_org_external_id_idx" ON "scim_groups" USING btree ("org_id","external_id");--> statement-breakpoint
CREATE INDEX "scim_groups_org_created_idx" ON "scim_groups" USING btree ("org_id","created_at");--> statement-breakpoint
CREATE TABLE "scim_group_members" (
	"group_id" uuid NOT NULL,
	"user_id" uuid NOT NULL,
	CONSTRAINT "scim_group_members_group_id_user_id_pk" PRIMARY KEY("group_id","user_id")
);
--> statement-breakpoint
ALTER TABLE "scim_group_members" ADD CONSTRAINT "scim_group_members_group_id_scim_groups_id_fk" FOREIGN KEY ("group_id") REFERENCES "public"."scim_groups"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "scim_group_members" ADD CONSTRAINT "scim_group_members_user_id_scim_users_user_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."scim_users"("user_id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "scim_group_members_user_idx" ON "scim_group_members" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "scim_users_org_created_idx" ON "scim_users" USING btree ("org_id","created_at");--> statement-breakpoint
CREATE INDEX "scim_users_org_updated_idx" ON "scim_users" USING btree ("org_id","updated_at");
