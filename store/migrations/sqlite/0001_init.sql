-- Times are INTEGER unix microseconds UTC; durations are INTEGER
-- microseconds. Booleans are INTEGER 0 or 1. Empty strings, not NULL, stand
-- for "no value" in text columns; the only NULL is keys.revoked_at (active).

CREATE TABLE keys (
	id           TEXT    NOT NULL PRIMARY KEY,
	hash         BLOB    NOT NULL UNIQUE CHECK (length(hash) = 32), -- SHA-256 of the secret
	hint         TEXT    NOT NULL DEFAULT '',
	name         TEXT    NOT NULL DEFAULT '',
	org          TEXT    NOT NULL DEFAULT '',
	team         TEXT    NOT NULL DEFAULT '',
	project      TEXT    NOT NULL DEFAULT '',
	owner        TEXT    NOT NULL DEFAULT '',
	rpm          INTEGER NOT NULL DEFAULT 0,
	tpm          INTEGER NOT NULL DEFAULT 0,
	max_inflight INTEGER NOT NULL DEFAULT 0,
	tags         TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(tags) AND json_type(tags) = 'array'),
	created_at   INTEGER NOT NULL,
	revoked_at   INTEGER            -- NULL while the key is active
) STRICT;

CREATE INDEX keys_created_at ON keys (created_at, id);
CREATE INDEX keys_org_team ON keys (org, team);

-- One row per proxied request. key_id has no foreign key: a request
-- rejected before authentication is accounted with an empty key_id, and an
-- accounting row must never be refused.
CREATE TABLE records (
	request_id        TEXT    NOT NULL PRIMARY KEY,
	time              INTEGER NOT NULL,
	key_id            TEXT    NOT NULL DEFAULT '',
	project           TEXT    NOT NULL DEFAULT '',
	team              TEXT    NOT NULL DEFAULT '',
	org               TEXT    NOT NULL DEFAULT '',
	model             TEXT    NOT NULL DEFAULT '',
	pool              TEXT    NOT NULL DEFAULT '',
	upstream          TEXT    NOT NULL DEFAULT '',
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	cached_tokens     INTEGER NOT NULL DEFAULT 0,
	gpu_hours         REAL    NOT NULL DEFAULT 0,
	status            INTEGER NOT NULL DEFAULT 0,
	outcome           TEXT    NOT NULL DEFAULT '',
	estimated         INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1)),
	stream            INTEGER NOT NULL DEFAULT 0 CHECK (stream IN (0, 1)),
	priority          INTEGER NOT NULL DEFAULT 0,
	latency_us        INTEGER NOT NULL DEFAULT 0,
	ttfb_us           INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX records_time ON records (time, request_id);
