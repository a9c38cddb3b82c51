package store

// recordCols are the columns of records that WriteRecords writes and
// Records reads, in this order, in both backends.
const recordCols = `request_id, time, key_id, project, team, org, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
	status, outcome, estimated, stream, priority, latency_us, ttfb_us, tags`

// purgeChunk is how many records one purge transaction deletes: a large
// purge goes in steps, so that accounting writes interleave with it
// instead of waiting for the whole of it.
const purgeChunk = 10000

// nonNil returns s, or an empty slice for nil: a list (tags, members, a
// share path) is stored as an empty array, never as NULL.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
