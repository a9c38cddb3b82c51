-- The gateways serving on this store, each with the time its heartbeat
-- expires: replicas without Redis count the live ones and each enforces
-- its slice of every budget and key limit.

CREATE TABLE replicas (
	name       TEXT    NOT NULL PRIMARY KEY,
	expires_at INTEGER NOT NULL -- unix microseconds UTC, as every time here
) STRICT;
