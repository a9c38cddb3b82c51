-- The durable outbox of alerts (and anything else that must be delivered
-- once), as in the SQLite store: one row per event and channel, claimed
-- under a lease (SELECT … FOR UPDATE SKIP LOCKED), so that several
-- gateways never hold the same row at once.

CREATE TABLE outbox (
	id              text        COLLATE "C" NOT NULL,
	channel         text        COLLATE "C" NOT NULL,
	payload         text        NOT NULL,
	created_at      timestamptz NOT NULL,
	next_attempt_at timestamptz NOT NULL,
	attempts        integer     NOT NULL DEFAULT 0,
	last_error      text        NOT NULL DEFAULT '',
	lease_token     text        NOT NULL DEFAULT '',
	lease_until     timestamptz,          -- NULL: nobody holds it
	delivered_at    timestamptz,          -- NULL: not delivered yet
	PRIMARY KEY (id, channel)
);

CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE delivered_at IS NULL;

-- The accounts' Slurm GPU limits (llmflow.GPULimits: GrpTRESMins and
-- GrpTRES gres/gpu counts; NULL = no limit), and the count of accounts
-- whose limits an import changed.
ALTER TABLE accounts ADD COLUMN grp_gpu_minutes bigint CHECK (grp_gpu_minutes >= 0);
ALTER TABLE accounts ADD COLUMN grp_gpus bigint CHECK (grp_gpus >= 0);
ALTER TABLE sync_runs ADD COLUMN limits_changed bigint NOT NULL DEFAULT 0;
