-- Usage the write-back could not write into slurmdbd, as in the SQLite
-- store: llmflow report subtracts it and says it apart. Each write-back
-- replaces the rows of the hours it wrote.

CREATE TABLE writeback_unwritten (
	cluster     text        COLLATE "C" NOT NULL,
	hour        timestamptz NOT NULL,
	account     text        COLLATE "C" NOT NULL,
	user_name   text        COLLATE "C" NOT NULL,
	gpu_seconds bigint      NOT NULL,
	reason      text        NOT NULL,
	PRIMARY KEY (cluster, hour, account, user_name)
);

-- Where slurmdbd placed each user association of a write-back cluster
-- (its lft), as in the SQLite store: llmflow report lists in that order.

CREATE TABLE writeback_assoc_order (
	cluster   text   COLLATE "C" NOT NULL,
	account   text   COLLATE "C" NOT NULL,
	user_name text   COLLATE "C" NOT NULL,
	lft       bigint NOT NULL,
	PRIMARY KEY (cluster, account, user_name)
);
