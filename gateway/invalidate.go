package gateway

// ForgetKey drops the key whose secret hashes to hash from this gateway's
// caches (valid keys and misses), so that the next request with it reads
// the store again: a key revoked through another replica stops working
// here at once instead of when its cache entry expires.
func (g *Gateway) ForgetKey(hash [32]byte) { g.auth.forget(hash) }

// ForgetAllKeys empties this gateway's key caches (valid keys and
// misses): a replica that was cut from the other replicas' announcements
// (its subscription to Redis broke) cannot know what it missed.
func (g *Gateway) ForgetAllKeys() {
	g.auth.hits.Clear()
	g.auth.misses.Clear()
}
