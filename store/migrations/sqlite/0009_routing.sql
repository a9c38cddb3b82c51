-- Runtime routing: upstreams of configured models and model aliases
-- registered through the admin API (smol-llm-proxy's servers and aliases).
-- The configuration stays authoritative: a gateway ignores a row that a
-- configured name shadows. Every change bumps admin_state.generation, so
-- gateways sharing the store reload their routes.

CREATE TABLE runtime_upstreams (
	model      TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	base_url   TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	by_actor   TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (model, name)
) STRICT;

CREATE TABLE model_aliases (
	name       TEXT    NOT NULL PRIMARY KEY,
	model      TEXT    NOT NULL,
	updated_at INTEGER NOT NULL,
	by_actor   TEXT    NOT NULL DEFAULT ''
) STRICT;
