-- The durable outbox of alerts (and anything else that must be delivered
-- once): one row per event and channel. (id, channel) is the key, so
-- enqueueing an event again is a no-op, across restarts and gateways.
-- A dispatcher claims due rows by setting lease_token and lease_until;
-- a crashed dispatcher's lease expires and another one takes the row.

CREATE TABLE outbox (
	id              TEXT    NOT NULL,
	channel         TEXT    NOT NULL,
	payload         TEXT    NOT NULL,
	created_at      INTEGER NOT NULL, -- unix microseconds UTC, as every time here
	next_attempt_at INTEGER NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT    NOT NULL DEFAULT '',
	lease_token     TEXT    NOT NULL DEFAULT '',
	lease_until     INTEGER,          -- NULL: nobody holds it
	delivered_at    INTEGER,          -- NULL: not delivered yet
	PRIMARY KEY (id, channel)
) STRICT;

-- What a claim scans: the undelivered rows by due time.
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE delivered_at IS NULL;

-- The accounts' Slurm GPU limits (llmflow.GPULimits: GrpTRESMins and
-- GrpTRES gres/gpu counts; NULL = no limit), and the count of accounts
-- whose limits an import changed.
ALTER TABLE accounts ADD COLUMN grp_gpu_minutes INTEGER CHECK (grp_gpu_minutes >= 0);
ALTER TABLE accounts ADD COLUMN grp_gpus INTEGER CHECK (grp_gpus >= 0);
ALTER TABLE sync_runs ADD COLUMN limits_changed INTEGER NOT NULL DEFAULT 0;
