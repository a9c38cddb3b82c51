-- Times are timestamptz (microseconds); durations are bigint microseconds.
-- Empty strings, not NULL, stand for "no value" in text columns; the only
-- NULL is keys.revoked_at (active). Text columns use the "C" collation:
-- byte order, as in the SQLite store, whatever the database's locale.

CREATE TABLE keys (
	id           text        COLLATE "C" NOT NULL,
	hash         bytea       NOT NULL CHECK (length(hash) = 32), -- SHA-256 of the secret
	hint         text        COLLATE "C" NOT NULL DEFAULT '',
	name         text        COLLATE "C" NOT NULL DEFAULT '',
	org          text        COLLATE "C" NOT NULL DEFAULT '',
	team         text        COLLATE "C" NOT NULL DEFAULT '',
	project      text        COLLATE "C" NOT NULL DEFAULT '',
	owner        text        COLLATE "C" NOT NULL DEFAULT '',
	rpm          bigint      NOT NULL DEFAULT 0,
	tpm          bigint      NOT NULL DEFAULT 0,
	max_inflight bigint      NOT NULL DEFAULT 0,
	tags         text[]      NOT NULL DEFAULT '{}',
	created_at   timestamptz NOT NULL,
	revoked_at   timestamptz,              -- NULL while the key is active
	CONSTRAINT keys_pkey PRIMARY KEY (id),
	CONSTRAINT keys_hash_key UNIQUE (hash)
);

CREATE INDEX keys_created_at ON keys (created_at, id);
CREATE INDEX keys_org_team ON keys (org, team);

-- One row per proxied request. key_id has no foreign key: a request
-- rejected before authentication is accounted with an empty key_id, and an
-- accounting row must never be refused.
CREATE TABLE records (
	request_id        text             COLLATE "C" NOT NULL PRIMARY KEY,
	time              timestamptz      NOT NULL,
	key_id            text             COLLATE "C" NOT NULL DEFAULT '',
	project           text             COLLATE "C" NOT NULL DEFAULT '',
	team              text             COLLATE "C" NOT NULL DEFAULT '',
	org               text             COLLATE "C" NOT NULL DEFAULT '',
	model             text             COLLATE "C" NOT NULL DEFAULT '',
	pool              text             COLLATE "C" NOT NULL DEFAULT '',
	upstream          text             COLLATE "C" NOT NULL DEFAULT '',
	prompt_tokens     bigint           NOT NULL DEFAULT 0,
	completion_tokens bigint           NOT NULL DEFAULT 0,
	cached_tokens     bigint           NOT NULL DEFAULT 0,
	gpu_hours         double precision NOT NULL DEFAULT 0,
	status            bigint           NOT NULL DEFAULT 0,
	outcome           text             COLLATE "C" NOT NULL DEFAULT '',
	estimated         boolean          NOT NULL DEFAULT false,
	stream            boolean          NOT NULL DEFAULT false,
	priority          bigint           NOT NULL DEFAULT 0,
	latency_us        bigint           NOT NULL DEFAULT 0,
	ttfb_us           bigint           NOT NULL DEFAULT 0,
	tags              text[]           COLLATE "C" NOT NULL DEFAULT '{}'
);

CREATE INDEX records_time ON records (time, request_id);

-- Fair-share usage per pool, saved periodically and at shutdown so that it
-- survives a restart; it is decayed across the downtime when loaded.
CREATE TABLE share_usage (
	pool      text             COLLATE "C" NOT NULL,
	path      text[]           COLLATE "C" NOT NULL, -- {org,team,project}
	gpu_hours double precision NOT NULL,
	PRIMARY KEY (pool, path)
);

-- One row per pool: when its usage was saved.
CREATE TABLE share_usage_saved (
	pool     text        COLLATE "C" NOT NULL PRIMARY KEY,
	saved_at timestamptz NOT NULL
);
