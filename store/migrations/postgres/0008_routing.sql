-- Runtime routing, as in the SQLite store: upstreams of configured models
-- and model aliases registered through the admin API. Every change bumps
-- admin_state.generation, so gateways sharing the store reload their
-- routes.

CREATE TABLE runtime_upstreams (
	model      text        COLLATE "C" NOT NULL,
	name       text        COLLATE "C" NOT NULL,
	base_url   text        NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	by_actor   text        COLLATE "C" NOT NULL DEFAULT '',
	PRIMARY KEY (model, name)
);

CREATE TABLE model_aliases (
	name       text        COLLATE "C" NOT NULL PRIMARY KEY,
	model      text        COLLATE "C" NOT NULL,
	updated_at timestamptz NOT NULL,
	by_actor   text        COLLATE "C" NOT NULL DEFAULT ''
);
