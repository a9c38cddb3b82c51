-- The organisation tree imported from Slurm (accounts are disabled, never
-- deleted) and the history of the imports, as in the SQLite store.

CREATE TABLE accounts (
	name       text             COLLATE "C" NOT NULL PRIMARY KEY,
	kind       smallint         NOT NULL CHECK (kind IN (1, 2, 3)), -- 1 org, 2 team, 3 project
	parent     text             COLLATE "C" NOT NULL DEFAULT '',
	shares     double precision NOT NULL DEFAULT 0,
	use_parent boolean          NOT NULL DEFAULT false,
	disabled   boolean          NOT NULL DEFAULT false,
	members    text[]           COLLATE "C" NOT NULL DEFAULT '{}',
	source     text             COLLATE "C" NOT NULL DEFAULT '',
	position   integer          NOT NULL -- tree order: parents before children
);

CREATE TABLE sync_runs (
	id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	started        timestamptz NOT NULL,
	finished       timestamptz NOT NULL,
	source         text        NOT NULL,
	dry_run        boolean     NOT NULL DEFAULT false,
	created        bigint      NOT NULL DEFAULT 0,
	shares_changed bigint      NOT NULL DEFAULT 0,
	reparented     bigint      NOT NULL DEFAULT 0,
	disabled       bigint      NOT NULL DEFAULT 0,
	reenabled      bigint      NOT NULL DEFAULT 0,
	members        bigint      NOT NULL DEFAULT 0,
	unchanged      bigint      NOT NULL DEFAULT 0,
	outcome        text        NOT NULL,
	error          text        NOT NULL DEFAULT ''
);
