-- Issue 8: the fair-share tree has Slurm's user associations as leaves.
-- accounts.users holds an account's user associations with their shares
-- (JSON array of {user, partition, shares, use_parent}); kind 4 is Slurm's
-- root, present only to carry root's own user associations. SQLite cannot
-- change a CHECK constraint in place: the table is rebuilt.

CREATE TABLE accounts_new (
	name       TEXT    NOT NULL PRIMARY KEY,
	kind       INTEGER NOT NULL CHECK (kind IN (1, 2, 3, 4)), -- 1 org, 2 team, 3 project, 4 Slurm's root
	parent     TEXT    NOT NULL DEFAULT '',
	shares     REAL    NOT NULL DEFAULT 0,
	use_parent INTEGER NOT NULL DEFAULT 0,
	disabled   INTEGER NOT NULL DEFAULT 0,
	members    TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(members) AND json_type(members) = 'array'),
	users      TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(users) AND json_type(users) = 'array'),
	source     TEXT    NOT NULL DEFAULT '',
	position   INTEGER NOT NULL, -- tree order: parents before children
	grp_gpu_minutes INTEGER CHECK (grp_gpu_minutes >= 0), -- Slurm's GrpTRESMins gres/gpu; NULL: no limit (0006)
	grp_gpus        INTEGER CHECK (grp_gpus >= 0)         -- Slurm's GrpTRES gres/gpu; NULL: no limit (0006)
) STRICT;

INSERT INTO accounts_new (name, kind, parent, shares, use_parent, disabled, members, source, position, grp_gpu_minutes, grp_gpus)
SELECT name, kind, parent, shares, use_parent, disabled, members, source, position, grp_gpu_minutes, grp_gpus FROM accounts;

DROP TABLE accounts;

ALTER TABLE accounts_new RENAME TO accounts;
