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
