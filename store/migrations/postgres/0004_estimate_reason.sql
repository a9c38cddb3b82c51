-- Why a record's usage is an estimate (llmflow.EstimateReason): '' when the
-- engine reported it. Records written before this migration keep '' even
-- when estimated: their reason was not kept.

ALTER TABLE records ADD COLUMN estimate_reason text COLLATE "C" NOT NULL DEFAULT '';
