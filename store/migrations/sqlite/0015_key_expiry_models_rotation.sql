-- Keys as people expect them (issue 23): an expiry (NULL: never), a list
-- of the models the key may use ('[]': every model its team may), and
-- rotation: the secret before the last rotation (its hash) stays valid
-- until prev_expires_at.

ALTER TABLE keys ADD COLUMN expires_at INTEGER;
ALTER TABLE keys ADD COLUMN models TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(models) AND json_type(models) = 'array');
ALTER TABLE keys ADD COLUMN prev_hash BLOB CHECK (prev_hash IS NULL OR length(prev_hash) = 32);
ALTER TABLE keys ADD COLUMN prev_expires_at INTEGER;
CREATE UNIQUE INDEX keys_prev_hash ON keys (prev_hash);
