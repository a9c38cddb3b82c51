-- Reclaim (pool reclaim = "preempt"): how many times a request's slot was
-- taken back and its answer resumed, and the prompt tokens the engine
-- prefilled again to resume it (the pool's overhead, charged to no
-- budget). 0 for records written before.

ALTER TABLE records ADD COLUMN preemptions bigint NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN recomputed_tokens bigint NOT NULL DEFAULT 0;
