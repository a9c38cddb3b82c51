package store

import (
	"cmp"
	"slices"

	"github.com/go-llmflow/llmflow"
)

// batchRollups sums a batch's newly stored records per hour and
// dimensions, as the rollups and rollups_by_tag tables count them, so
// that the store adds a few rows per batch to each instead of reading the
// batch back. The owner is not a dimension here: it is the key's, looked
// up by the statement that adds the rows.
type batchRollups struct {
	plain map[rollupDims]*rollupSum
	byTag map[taggedDims]*rollupSum

	// The last record's: a batch comes mostly in runs of one key.
	last            rollupDims
	lastSum, lastNo *rollupSum // plain, and under the tag ""
}

// rollupDims are a rollup row's dimensions but the owner (a function of
// key).
type rollupDims struct {
	hour                                 int64 // start of the hour, unix microseconds UTC
	org, team, project, key, model, pool string
}

type taggedDims struct {
	rollupDims
	tag string
}

// rollupSum is what a rollup row counts. GPU-hours are summed with
// Neumaier's compensation, as SQLite's sum() does.
type rollupSum struct {
	requests, prompt, completion, cached, estimated int64
	gpu, gpuComp                                    float64
}

func (s *rollupSum) add(r *llmflow.Record) {
	s.requests++
	s.prompt += r.PromptTokens
	s.completion += r.CompletionTokens
	s.cached += r.CachedTokens
	if r.Estimated {
		s.estimated++
	}
	// Neumaier: keep the low-order bits that the running sum drops.
	t := s.gpu + r.GPUHours
	if abs(s.gpu) >= abs(r.GPUHours) {
		s.gpuComp += (s.gpu - t) + r.GPUHours
	} else {
		s.gpuComp += (r.GPUHours - t) + s.gpu
	}
	s.gpu = t
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// gpuHours is the compensated sum.
func (s *rollupSum) gpuHours() float64 { return s.gpu + s.gpuComp }

func newBatchRollups(n int) *batchRollups {
	return &batchRollups{plain: make(map[rollupDims]*rollupSum, min(n, 64)), byTag: make(map[taggedDims]*rollupSum, min(n, 64))}
}

// add counts r (its usage clamped already), whose Time is at hour: once
// in its plain rollup and once under each of its distinct tags, or under
// the tag "" when it has none.
func (b *batchRollups) add(r *llmflow.Record, hour int64) {
	d := rollupDims{hour, r.Org, r.Team, r.Project, r.KeyID, r.Model, r.Pool}
	if b.lastSum == nil || d != b.last {
		sum := b.plain[d]
		if sum == nil {
			sum = &rollupSum{}
			b.plain[d] = sum
		}
		b.last, b.lastSum, b.lastNo = d, sum, nil
	}
	b.lastSum.add(r)
	if len(r.Tags) == 0 {
		if b.lastNo == nil {
			b.lastNo = b.tagSum(d, "")
		}
		b.lastNo.add(r)
		return
	}
	for i, t := range r.Tags {
		if !slices.Contains(r.Tags[:i], t) {
			b.addTag(d, t, r)
		}
	}
}

func (b *batchRollups) addTag(d rollupDims, tag string, r *llmflow.Record) {
	b.tagSum(d, tag).add(r)
}

func (b *batchRollups) tagSum(d rollupDims, tag string) *rollupSum {
	k := taggedDims{d, tag}
	sum := b.byTag[k]
	if sum == nil {
		sum = &rollupSum{}
		b.byTag[k] = sum
	}
	return sum
}

func (d rollupDims) compare(e rollupDims) int {
	return cmp.Or(cmp.Compare(d.hour, e.hour), cmp.Compare(d.org, e.org), cmp.Compare(d.team, e.team),
		cmp.Compare(d.project, e.project), cmp.Compare(d.key, e.key), cmp.Compare(d.model, e.model), cmp.Compare(d.pool, e.pool))
}

type plainRow struct {
	rollupDims
	*rollupSum
}

type taggedRow struct {
	taggedDims
	*rollupSum
}

// rows returns the sums in the order of their dimensions (the same in
// every transaction, so concurrent writers take row locks in one order).
func (b *batchRollups) rows() ([]plainRow, []taggedRow) {
	plain := make([]plainRow, 0, len(b.plain))
	for d, s := range b.plain {
		plain = append(plain, plainRow{d, s})
	}
	slices.SortFunc(plain, func(x, y plainRow) int { return x.compare(y.rollupDims) })
	tagged := make([]taggedRow, 0, len(b.byTag))
	for d, s := range b.byTag {
		tagged = append(tagged, taggedRow{d, s})
	}
	slices.SortFunc(tagged, func(x, y taggedRow) int {
		return cmp.Or(x.rollupDims.compare(y.rollupDims), cmp.Compare(x.tag, y.tag))
	})
	return plain, tagged
}
