-- Budgets in GPU-hours per scope and period, their temporary increases,
-- and keys an administrator can deactivate and reactivate.

ALTER TABLE keys ADD COLUMN disabled boolean NOT NULL DEFAULT false;

-- One budget per scope: kind, name, model ('' = every model).
CREATE TABLE budgets (
	kind       text             COLLATE "C" NOT NULL CHECK (kind IN ('org', 'team', 'project', 'key', 'tag')),
	name       text             COLLATE "C" NOT NULL CHECK (name <> ''),
	model      text             COLLATE "C" NOT NULL DEFAULT '',
	period     text             COLLATE "C" NOT NULL CHECK (period IN ('day', 'week', 'month')),
	max_cost   double precision NOT NULL CHECK (max_cost >= 0),
	soft_limit double precision NOT NULL DEFAULT 0 CHECK (soft_limit >= 0),
	updated_at timestamptz      NOT NULL,
	CONSTRAINT budgets_pkey PRIMARY KEY (kind, name, model)
);

-- Increases outlive the budget being set again (and deleted: they apply
-- again if it is set before they expire).
CREATE TABLE budget_increases (
	id         bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	kind       text             COLLATE "C" NOT NULL,
	name       text             COLLATE "C" NOT NULL,
	model      text             COLLATE "C" NOT NULL DEFAULT '',
	amount     double precision NOT NULL CHECK (amount > 0),
	expires_at timestamptz      NOT NULL,
	created_at timestamptz      NOT NULL
);

CREATE INDEX budget_increases_expires ON budget_increases (expires_at);
