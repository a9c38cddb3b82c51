-- Request tags, and hourly rollups maintained by WriteRecords in the same
-- transaction as the records they count. Reports read rollups; raw records
-- may be purged (PurgeRecords) while the rollups stay.

ALTER TABLE records ADD COLUMN tags TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags) AND json_type(tags) = 'array');

-- One row per hour and combination of the dimensions. owner is the key's
-- owner when the record was written ('' without a key or an owner).
CREATE TABLE rollups (
	hour               INTEGER NOT NULL, -- start of the hour, unix microseconds UTC
	org                TEXT    NOT NULL,
	team               TEXT    NOT NULL,
	project            TEXT    NOT NULL,
	key_id             TEXT    NOT NULL,
	owner              TEXT    NOT NULL,
	model              TEXT    NOT NULL,
	pool               TEXT    NOT NULL,
	requests           INTEGER NOT NULL,
	prompt_tokens      INTEGER NOT NULL,
	completion_tokens  INTEGER NOT NULL,
	cached_tokens      INTEGER NOT NULL,
	gpu_hours          REAL    NOT NULL,
	estimated_requests INTEGER NOT NULL,
	PRIMARY KEY (hour, org, team, project, key_id, owner, model, pool)
) STRICT, WITHOUT ROWID;

-- The same per tag: a request counts once under each of its distinct tags,
-- a request without tags under the tag ''.
CREATE TABLE rollups_by_tag (
	hour               INTEGER NOT NULL,
	tag                TEXT    NOT NULL,
	org                TEXT    NOT NULL,
	team               TEXT    NOT NULL,
	project            TEXT    NOT NULL,
	key_id             TEXT    NOT NULL,
	owner              TEXT    NOT NULL,
	model              TEXT    NOT NULL,
	pool               TEXT    NOT NULL,
	requests           INTEGER NOT NULL,
	prompt_tokens      INTEGER NOT NULL,
	completion_tokens  INTEGER NOT NULL,
	cached_tokens      INTEGER NOT NULL,
	gpu_hours          REAL    NOT NULL,
	estimated_requests INTEGER NOT NULL,
	PRIMARY KEY (hour, tag, org, team, project, key_id, owner, model, pool)
) STRICT, WITHOUT ROWID;

-- Records written before this migration are rolled up now (none had tags).
INSERT INTO rollups
SELECT r.time - ((r.time % 3600000000) + 3600000000) % 3600000000,
	r.org, r.team, r.project, r.key_id, COALESCE(k.owner, ''), r.model, r.pool,
	count(*), sum(r.prompt_tokens), sum(r.completion_tokens), sum(r.cached_tokens),
	sum(r.gpu_hours), sum(r.estimated)
FROM records r LEFT JOIN keys k ON k.id = r.key_id
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;

INSERT INTO rollups_by_tag
SELECT hour, '', org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests
FROM rollups;
