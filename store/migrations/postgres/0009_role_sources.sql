-- Issue 11, as in the SQLite store: the source of each role grant ('admin'
-- by hand, 'slurm' by the Slurm import, which never touches the others),
-- whether the import created a user, and whether it disabled them.

ALTER TABLE admin_roles ADD COLUMN source text COLLATE "C" NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'slurm'));
ALTER TABLE admin_users ADD COLUMN source text COLLATE "C" NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'slurm'));
ALTER TABLE admin_users ADD COLUMN disabled_by text COLLATE "C" NOT NULL DEFAULT '' CHECK (disabled_by IN ('', 'slurm'));
