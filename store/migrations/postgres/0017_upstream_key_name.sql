-- A runtime upstream's own engine key: the name of a file in the
-- configuration's upstream_key_dir ('' = none), never a path.

ALTER TABLE runtime_upstreams ADD COLUMN key_name text NOT NULL DEFAULT '';
