-- A runtime upstream gets the model's engine key only when an admin said
-- so (inherit_key, audited), as in the SQLite store. Rows stored before
-- get none.

ALTER TABLE runtime_upstreams ADD COLUMN inherit_key boolean NOT NULL DEFAULT false;
