-- Fair-share usage per pool, saved periodically and at shutdown so that it
-- survives a restart; it is decayed across the downtime when loaded.

CREATE TABLE share_usage (
	pool      TEXT NOT NULL,
	path      TEXT NOT NULL CHECK (json_valid(path) AND json_type(path) = 'array'), -- ["org","team","project"]
	gpu_hours REAL NOT NULL,
	PRIMARY KEY (pool, path)
) STRICT;

-- One row per pool: when its usage was saved.
CREATE TABLE share_usage_saved (
	pool     TEXT    NOT NULL PRIMARY KEY,
	saved_at INTEGER NOT NULL
) STRICT;
