-- The organisation tree imported from Slurm (accounts are disabled, never
-- deleted) and the history of the imports.

CREATE TABLE accounts (
	name       TEXT    NOT NULL PRIMARY KEY,
	kind       INTEGER NOT NULL CHECK (kind IN (1, 2, 3)), -- 1 org, 2 team, 3 project
	parent     TEXT    NOT NULL DEFAULT '',
	shares     REAL    NOT NULL DEFAULT 0,
	use_parent INTEGER NOT NULL DEFAULT 0,
	disabled   INTEGER NOT NULL DEFAULT 0,
	members    TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(members) AND json_type(members) = 'array'),
	source     TEXT    NOT NULL DEFAULT '',
	position   INTEGER NOT NULL -- tree order: parents before children
) STRICT;

CREATE TABLE sync_runs (
	id             INTEGER PRIMARY KEY AUTOINCREMENT,
	started        INTEGER NOT NULL,
	finished       INTEGER NOT NULL,
	source         TEXT    NOT NULL,
	dry_run        INTEGER NOT NULL DEFAULT 0,
	created        INTEGER NOT NULL DEFAULT 0,
	shares_changed INTEGER NOT NULL DEFAULT 0,
	reparented     INTEGER NOT NULL DEFAULT 0,
	disabled       INTEGER NOT NULL DEFAULT 0,
	reenabled      INTEGER NOT NULL DEFAULT 0,
	members        INTEGER NOT NULL DEFAULT 0,
	unchanged      INTEGER NOT NULL DEFAULT 0,
	outcome        TEXT    NOT NULL,
	error          TEXT    NOT NULL DEFAULT ''
) STRICT;
