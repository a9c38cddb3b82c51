-- Issue 8: the fair-share tree has Slurm's user associations as leaves.
-- accounts.users holds an account's user associations with their shares
-- (JSON array of {user, partition, shares, use_parent}, as in SQLite); kind
-- 4 is Slurm's root, present only to carry root's own user associations.

ALTER TABLE accounts ADD COLUMN users text NOT NULL DEFAULT '[]';

ALTER TABLE accounts DROP CONSTRAINT accounts_kind_check;

ALTER TABLE accounts ADD CONSTRAINT accounts_kind_check CHECK (kind IN (1, 2, 3, 4)); -- 1 org, 2 team, 3 project, 4 Slurm's root
