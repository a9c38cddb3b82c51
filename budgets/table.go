package budgets

import "cmp"

// Table is the set of budgets in force, built by Mem.Apply. It is
// immutable; a change of budgets builds a new one (a new Gen).
type Table struct {
	gen     uint64
	slots   map[Scope]*Slot
	byName  map[kindName][]chainEntry // every model's budgets of one scope
	budgets []Budget
}

type kindName struct {
	kind Kind
	name string
}

// Gen identifies the table: a Chain built from another Gen is stale.
func (t *Table) Gen() uint64 { return t.gen }

// Len returns the number of budgets in force.
func (t *Table) Len() int { return len(t.slots) }

// Budgets returns the budgets in force.
func (t *Table) Budgets() []Budget { return t.budgets }

// Chain is the budgets a key falls under, computed once per key and
// table: its organisation, team, project, key and tags, each for all
// models and for single models. Select picks a request's from it without
// a map lookup or an allocation.
type Chain struct {
	Gen     uint64
	entries []chainEntry
}

type chainEntry struct {
	slot  *Slot
	model string
}

// Chain returns the chain of a key in org/team/project with the ID, owner
// ("" for none) and tags.
func (t *Table) Chain(org, team, project, keyID, owner string, tags []string) *Chain {
	c := &Chain{Gen: t.gen}
	if len(t.slots) == 0 {
		return c
	}
	add := func(k Kind, name string) {
		if name != "" {
			c.entries = append(c.entries, t.byName[kindName{k, name}]...)
		}
	}
	add(KindOrg, org)
	add(KindTeam, team)
	add(KindProject, project)
	if owner != "" {
		add(KindUser, UserScopeName(cmp.Or(project, team), owner))
	}
	add(KindKey, keyID)
	for i, tag := range tags {
		dup := false
		for _, u := range tags[:i] {
			dup = dup || u == tag
		}
		if !dup {
			add(KindTag, tag)
		}
	}
	return c
}

// Empty reports whether no budget applies to the key.
func (c *Chain) Empty() bool { return len(c.entries) == 0 }

// Select appends to dst the slots that apply to a request for model.
func (c *Chain) Select(model string, dst []*Slot) []*Slot {
	for _, e := range c.entries {
		if e.model == "" || e.model == model {
			dst = append(dst, e.slot)
		}
	}
	return dst
}

// TagSlots appends to dst the budgets of tag for all models and for
// model, unless already in dst (a tag also on the key).
func (t *Table) TagSlots(tag, model string, dst []*Slot) []*Slot {
	if len(t.slots) == 0 {
		return dst
	}
	for _, sc := range [2]Scope{{KindTag, tag, ""}, {KindTag, tag, model}} {
		s := t.slots[sc]
		if s == nil {
			continue
		}
		dup := false
		for _, d := range dst {
			dup = dup || d == s
		}
		if !dup {
			dst = append(dst, s)
		}
	}
	return dst
}
