-- Issue 11, Slurm is the source of who administers: the Slurm import grants
-- roles (coordinators, user associations) and removes them again when Slurm
-- no longer says so, but never touches a role granted by hand. Each grant
-- records its source ('admin': by hand through the admin API; 'slurm': by
-- the import); a user records whether the import created it and whether
-- the import disabled it (removed from Slurm: re-enabled when it comes
-- back; a user an admin disabled stays disabled).

ALTER TABLE admin_roles ADD COLUMN source TEXT NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'slurm'));
ALTER TABLE admin_users ADD COLUMN source TEXT NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'slurm'));
ALTER TABLE admin_users ADD COLUMN disabled_by TEXT NOT NULL DEFAULT '' CHECK (disabled_by IN ('', 'slurm'));
