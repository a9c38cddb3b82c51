-- A runtime upstream gets the model's engine key only when an admin said
-- so (inherit_key, audited): whoever registers an engine they control
-- would otherwise receive the key and other organisations' prompts. Rows
-- stored before get none.

ALTER TABLE runtime_upstreams ADD COLUMN inherit_key INTEGER NOT NULL DEFAULT 0 CHECK (inherit_key IN (0, 1));
