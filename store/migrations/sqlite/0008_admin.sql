-- Delegated administration: users, their admin tokens (SHA-256 only) and
-- roles, team model lists, accounts created or disabled through the admin
-- API, the audit trail of admin writes, and a generation counter that
-- every change of users, tokens or roles bumps (gateways compare it to
-- know their cached principals are still right).

CREATE TABLE admin_users (
	name        TEXT    NOT NULL PRIMARY KEY,
	org         TEXT    NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,
	disabled_at INTEGER             -- NULL while enabled
) STRICT;

CREATE TABLE admin_tokens (
	id         TEXT    NOT NULL PRIMARY KEY,
	user_name  TEXT    NOT NULL REFERENCES admin_users (name),
	hash       BLOB    NOT NULL UNIQUE CHECK (length(hash) = 32),
	hint       TEXT    NOT NULL DEFAULT '',
	name       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	revoked_at INTEGER              -- NULL while active
) STRICT;
CREATE INDEX admin_tokens_user ON admin_tokens (user_name);

CREATE TABLE admin_roles (
	user_name  TEXT    NOT NULL REFERENCES admin_users (name),
	role       TEXT    NOT NULL,
	org        TEXT    NOT NULL DEFAULT '',
	team       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	PRIMARY KEY (user_name, role, org, team)
) STRICT;

CREATE TABLE team_models (
	team   TEXT NOT NULL PRIMARY KEY,
	models TEXT NOT NULL CHECK (json_valid(models) AND json_type(models) = 'array')
) STRICT;

CREATE TABLE admin_accounts (
	id       INTEGER PRIMARY KEY AUTOINCREMENT, -- creation order: parents before children
	name     TEXT    NOT NULL UNIQUE,
	kind     INTEGER NOT NULL CHECK (kind IN (1, 2, 3)),
	parent   TEXT    NOT NULL DEFAULT '',
	created  INTEGER NOT NULL DEFAULT 0,
	disabled INTEGER NOT NULL DEFAULT 0,
	at       INTEGER NOT NULL
) STRICT;

CREATE TABLE audit (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	time   INTEGER NOT NULL,
	actor  TEXT    NOT NULL,
	action TEXT    NOT NULL,
	target TEXT    NOT NULL DEFAULT '',
	org    TEXT    NOT NULL DEFAULT '',
	team   TEXT    NOT NULL DEFAULT '',
	before TEXT    NOT NULL DEFAULT '',
	after  TEXT    NOT NULL DEFAULT '',
	remote TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX audit_time ON audit (time);

CREATE TABLE admin_state (
	id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
	generation INTEGER NOT NULL
) STRICT;
INSERT INTO admin_state (id, generation) VALUES (1, 1);
