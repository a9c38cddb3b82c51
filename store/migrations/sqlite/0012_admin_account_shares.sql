-- An organisation, team or project created through the admin API may be
-- given a share among its siblings (0: none, it only borrows), as the
-- configuration and Slurm give theirs.

ALTER TABLE admin_accounts ADD COLUMN shares REAL NOT NULL DEFAULT 0 CHECK (shares >= 0);
