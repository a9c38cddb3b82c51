-- Delegated administration, as in the SQLite store: users, their admin
-- tokens (SHA-256 only) and roles, team model lists, accounts created or
-- disabled through the admin API, the audit trail of admin writes, and the
-- generation counter every change of users, tokens or roles bumps.

CREATE TABLE admin_users (
	name        text        COLLATE "C" NOT NULL PRIMARY KEY,
	org         text        COLLATE "C" NOT NULL DEFAULT '',
	created_at  timestamptz NOT NULL,
	disabled_at timestamptz             -- NULL while enabled
);

CREATE TABLE admin_tokens (
	id         text        COLLATE "C" NOT NULL PRIMARY KEY,
	user_name  text        COLLATE "C" NOT NULL REFERENCES admin_users (name),
	hash       bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
	hint       text        COLLATE "C" NOT NULL DEFAULT '',
	name       text        COLLATE "C" NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	revoked_at timestamptz              -- NULL while active
);
CREATE INDEX admin_tokens_user ON admin_tokens (user_name);

CREATE TABLE admin_roles (
	user_name  text        COLLATE "C" NOT NULL REFERENCES admin_users (name),
	role       text        COLLATE "C" NOT NULL,
	org        text        COLLATE "C" NOT NULL DEFAULT '',
	team       text        COLLATE "C" NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	PRIMARY KEY (user_name, role, org, team)
);

CREATE TABLE team_models (
	team   text COLLATE "C" NOT NULL PRIMARY KEY,
	models text NOT NULL -- JSON array of model names
);

CREATE TABLE admin_accounts (
	id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- creation order: parents before children
	name     text        COLLATE "C" NOT NULL UNIQUE,
	kind     smallint    NOT NULL CHECK (kind IN (1, 2, 3)),
	parent   text        COLLATE "C" NOT NULL DEFAULT '',
	created  boolean     NOT NULL DEFAULT false,
	disabled boolean     NOT NULL DEFAULT false,
	at       timestamptz NOT NULL
);

CREATE TABLE audit (
	id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	time   timestamptz NOT NULL,
	actor  text        COLLATE "C" NOT NULL,
	action text        COLLATE "C" NOT NULL,
	target text        COLLATE "C" NOT NULL DEFAULT '',
	org    text        COLLATE "C" NOT NULL DEFAULT '',
	team   text        COLLATE "C" NOT NULL DEFAULT '',
	before text        NOT NULL DEFAULT '',
	after  text        NOT NULL DEFAULT '',
	remote text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_time ON audit (time);

CREATE TABLE admin_state (
	id         smallint NOT NULL PRIMARY KEY CHECK (id = 1),
	generation bigint   NOT NULL
);
INSERT INTO admin_state (id, generation) VALUES (1, 1);
