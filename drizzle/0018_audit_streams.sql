-- Audit streaming to a SIEM (docs/decisions.md "Audit streaming"). A stream belongs to a partner (its
-- own and its organisations' entries) or, without one, to the platform (every entry). Its cursor is
-- one row per hash chain of its scope: the position (`chain_seq`) of the last entry sent. A sender
-- holds the stream by `claim_id` until `lease_expires_at`, like a webhook delivery row.
CREATE TABLE "audit_streams" (
	"id" uuid PRIMARY KEY NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"partner_id" uuid,
	"type" varchar(10) NOT NULL,
	"url" text NOT NULL,
	"tls_ca" text,
	"secret_sealed" text,
	"status" varchar(20) DEFAULT 'pending' NOT NULL,
	"last_error" text,
	"last_sent_at" timestamp with time zone,
	"failures" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone,
	"claim_id" uuid,
	"lease_expires_at" timestamp with time zone
);--> statement-breakpoint
ALTER TABLE "audit_streams" ADD CONSTRAINT "audit_streams_partner_id_partners_id_fk" FOREIGN KEY ("partner_id") REFERENCES "public"."partners"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "audit_streams_partner_idx" ON "audit_streams" USING btree ("partner_id");--> statement-breakpoint
CREATE TABLE "audit_stream_cursors" (
	"stream_id" uuid NOT NULL,
	"scope_id" uuid NOT NULL,
	"seq" bigint NOT NULL,
	CONSTRAINT "audit_stream_cursors_pk" PRIMARY KEY ("stream_id","scope_id")
);--> statement-breakpoint
ALTER TABLE "audit_stream_cursors" ADD CONSTRAINT "audit_stream_cursors_stream_id_audit_streams_id_fk" FOREIGN KEY ("stream_id") REFERENCES "public"."audit_streams"("id") ON DELETE cascade ON UPDATE no action;
