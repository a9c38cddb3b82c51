-- Budgets in GPU-hours per scope and period, their temporary increases,
-- and keys an administrator can deactivate and reactivate.

ALTER TABLE keys ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1));

-- One budget per scope: kind, name, model ('' = every model).
CREATE TABLE budgets (
	kind       TEXT    NOT NULL CHECK (kind IN ('org', 'team', 'project', 'key', 'tag')),
	name       TEXT    NOT NULL CHECK (name <> ''),
	model      TEXT    NOT NULL DEFAULT '',
	period     TEXT    NOT NULL CHECK (period IN ('day', 'week', 'month')),
	max_cost   REAL    NOT NULL CHECK (max_cost >= 0),
	soft_limit REAL    NOT NULL DEFAULT 0 CHECK (soft_limit >= 0),
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (kind, name, model)
) STRICT;

-- Increases outlive the budget being set again (and deleted: they apply
-- again if it is set before they expire).
CREATE TABLE budget_increases (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	kind       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	model      TEXT    NOT NULL DEFAULT '',
	amount     REAL    NOT NULL CHECK (amount > 0),
	expires_at INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX budget_increases_expires ON budget_increases (expires_at);
