ALTER TABLE "passkeys" ADD COLUMN "sign_in" boolean DEFAULT false NOT NULL;
