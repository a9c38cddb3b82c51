-- Hourly rollups, maintained by WriteRecords in the same statement as the
-- records they count (only the records actually inserted). Reports read
-- rollups; raw records may be purged (PurgeRecords) while rollups stay.

-- One row per hour and combination of the dimensions. owner is the key's
-- owner when the record was written ('' without a key or an owner).
CREATE TABLE rollups (
	hour               timestamptz      NOT NULL, -- start of the UTC hour
	org                text             COLLATE "C" NOT NULL,
	team               text             COLLATE "C" NOT NULL,
	project            text             COLLATE "C" NOT NULL,
	key_id             text             COLLATE "C" NOT NULL,
	owner              text             COLLATE "C" NOT NULL,
	model              text             COLLATE "C" NOT NULL,
	pool               text             COLLATE "C" NOT NULL,
	requests           bigint           NOT NULL,
	prompt_tokens      bigint           NOT NULL,
	completion_tokens  bigint           NOT NULL,
	cached_tokens      bigint           NOT NULL,
	gpu_hours          double precision NOT NULL,
	estimated_requests bigint           NOT NULL,
	PRIMARY KEY (hour, org, team, project, key_id, owner, model, pool)
);

-- The same per tag: a request counts once under each of its distinct tags,
-- a request without tags under the tag ''.
CREATE TABLE rollups_by_tag (
	hour               timestamptz      NOT NULL,
	tag                text             COLLATE "C" NOT NULL,
	org                text             COLLATE "C" NOT NULL,
	team               text             COLLATE "C" NOT NULL,
	project            text             COLLATE "C" NOT NULL,
	key_id             text             COLLATE "C" NOT NULL,
	owner              text             COLLATE "C" NOT NULL,
	model              text             COLLATE "C" NOT NULL,
	pool               text             COLLATE "C" NOT NULL,
	requests           bigint           NOT NULL,
	prompt_tokens      bigint           NOT NULL,
	completion_tokens  bigint           NOT NULL,
	cached_tokens      bigint           NOT NULL,
	gpu_hours          double precision NOT NULL,
	estimated_requests bigint           NOT NULL,
	PRIMARY KEY (hour, tag, org, team, project, key_id, owner, model, pool)
);
