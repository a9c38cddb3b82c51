-- Usage the write-back could not write into slurmdbd (an association
-- whose account or user Slurm does not have live), per cluster, hour and
-- association: llmflow report subtracts it, so that its rows equal what
-- Slurm holds, and says it apart. Each write-back replaces the rows of the
-- hours it wrote.

CREATE TABLE writeback_unwritten (
	cluster     TEXT    NOT NULL,
	hour        INTEGER NOT NULL,
	account     TEXT    NOT NULL,
	user_name   TEXT    NOT NULL,
	gpu_seconds INTEGER NOT NULL,
	reason      TEXT    NOT NULL,
	PRIMARY KEY (cluster, hour, account, user_name)
) STRICT;

-- Where slurmdbd placed each user association of a write-back cluster
-- (its lft): sreport lists a user's accounts in that order (TopUsage
-- group), and sacctmgr puts a sibling added later first, so llmflow
-- report follows it. Each write-back replaces its cluster's rows.

CREATE TABLE writeback_assoc_order (
	cluster   TEXT    NOT NULL,
	account   TEXT    NOT NULL,
	user_name TEXT    NOT NULL,
	lft       INTEGER NOT NULL,
	PRIMARY KEY (cluster, account, user_name)
) STRICT;
