package reports

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// FromAssocHours is llmflow's usage in sreport's model, as the write-back puts
// it in slurmdbd: the account tree under root, one user association per
// (account, user) with usage, the hourly GPU-seconds of llmflow.AssocHours
// as gres/gpu rows and the same seconds as cpu rows (sreport sorts user
// lists by cpu), days and months of loc (slurmdbd's time zone) summed from
// them as slurmdbd does, and cluster rows of gpus GPUs for every hour of
// the period that has ended, from since (the first hour served) on.
// ProperName is left to the caller (a lookup on the host).
func FromAssocHours(tree llmflow.Accounts, rows []llmflow.AssocHour, gpus int, cluster string, p Period, now time.Time, loc *time.Location, since time.Time) Data {
	tresNames := []string{"gres/gpu", "cpu"}
	// the TRES table of the write-back's cluster: slurmdbd's built-in
	// TRES and gres/gpu (registered by the write-back), as -T knows them
	d := Data{Cluster: cluster, Now: now, Location: loc, TRES: append(slices.Clip(DefaultTRES), "gres/gpu")}
	d.Accounts = append(d.Accounts, Account{Name: "root"})
	known := map[string]bool{"root": true}
	for _, a := range tree {
		if a.Kind == llmflow.KindRoot {
			continue // Slurm's root itself (it carries root's user shares): d's root
		}
		parent := strings.ToLower(a.Parent)
		if parent == "" {
			parent = "root"
		}
		name := strings.ToLower(a.Name)
		d.Accounts = append(d.Accounts, Account{Name: name, Parent: parent, Deleted: a.Disabled})
		known[name] = true
	}
	// User associations in the tree's order (an account's before its
	// descendants', as slurmdbd's lft orders them; sreport's TopUsage
	// group joins a user's accounts in that order), then by user.
	assoc := map[[2]string]int{}
	var keys [][2]string
	for _, r := range rows {
		k := [2]string{r.Account, r.User}
		if _, ok := assoc[k]; !ok {
			if !known[r.Account] { // usage of an account no longer in the tree: under root
				d.Accounts = append(d.Accounts, Account{Name: r.Account, Parent: "root", Deleted: true})
				known[r.Account] = true
			}
			assoc[k] = -1
			keys = append(keys, k)
		}
	}
	pos := make(map[string]int, len(d.Accounts))
	for i, a := range d.Accounts {
		if _, dup := pos[a.Name]; !dup {
			pos[a.Name] = i
		}
	}
	slices.SortFunc(keys, func(x, y [2]string) int {
		return cmp.Or(cmp.Compare(pos[x[0]], pos[y[0]]), strings.Compare(x[1], y[1]))
	})
	for _, k := range keys {
		assoc[k] = len(d.Assocs)
		d.Assocs = append(d.Assocs, Assoc{Account: k[0], User: k[1]})
	}
	day := func(t time.Time) time.Time { y, m, dd := t.In(loc).Date(); return time.Date(y, m, dd, 0, 0, 0, 0, loc) }
	month := func(t time.Time) time.Time { y, m, _ := t.In(loc).Date(); return time.Date(y, m, 1, 0, 0, 0, 0, loc) }
	type gk struct {
		assoc int
		start int64
	}
	sums := [3]map[gk]uint64{{}, {}, {}}
	alloc := map[int64]uint64{}
	for _, r := range rows {
		i := assoc[[2]string{r.Account, r.User}]
		secs := uint64(r.AllocSecs)
		for g, start := range [3]time.Time{r.Hour, day(r.Hour), month(r.Hour)} {
			sums[g][gk{i, start.Unix()}] += secs
		}
		alloc[r.Hour.Unix()] += secs
	}
	for g := range sums {
		for k, s := range sums[g] {
			for _, tres := range tresNames {
				d.Usage[g] = append(d.Usage[g], UsageRow{Assoc: k.assoc, TRES: tres, Start: time.Unix(k.start, 0).UTC(), Secs: s})
			}
		}
		slices.SortFunc(d.Usage[g], func(a, b UsageRow) int {
			if c := a.Start.Compare(b.Start); c != 0 {
				return c
			}
			if a.Assoc != b.Assoc {
				return a.Assoc - b.Assoc
			}
			return strings.Compare(a.TRES, b.TRES)
		})
	}
	// cluster rows: every hour of the period that has ended
	capacity := uint64(gpus) * 3600
	crow := [3]map[int64]*ClusterRow{{}, {}, {}}
	var order [3][]int64
	end := p.End
	if now.Before(end) {
		end = now.Truncate(time.Hour)
	}
	for h := p.Start.Truncate(time.Hour); h.Before(end); h = h.Add(time.Hour) {
		if h.Before(since.Truncate(time.Hour)) {
			continue // the gateway did not serve yet
		}
		a := alloc[h.Unix()]
		idle := uint64(0)
		if a < capacity {
			idle = capacity - a
		}
		for g, start := range [3]time.Time{h, day(h), month(h)} {
			c := crow[g][start.Unix()]
			if c == nil {
				c = &ClusterRow{Start: start, Count: uint64(gpus)}
				crow[g][start.Unix()] = c
				order[g] = append(order[g], start.Unix())
			}
			c.Alloc += a
			c.Idle += idle
		}
	}
	for g := range crow {
		for _, s := range order[g] {
			for _, tres := range tresNames {
				c := *crow[g][s]
				c.TRES = tres
				d.ClusterUsage[g] = append(d.ClusterUsage[g], c)
			}
		}
	}
	return d
}

// WithoutUnwritten removes from rows the usage the write-back could not
// write into slurmdbd (un: per hour and association, as it computed it
// from the same rows), so that a report equals what Slurm holds. It
// returns the rows left and what it removed, summed per association (Hour
// zero), by account and user.
func WithoutUnwritten(rows []llmflow.AssocHour, un []llmflow.Unwritten) ([]llmflow.AssocHour, []llmflow.Unwritten) {
	if len(un) == 0 {
		return rows, nil
	}
	type key struct {
		hour          int64
		account, user string
	}
	drop := make(map[key]int64, len(un))
	for _, u := range un {
		drop[key{u.Hour.Unix(), u.Account, u.User}] += u.AllocSecs
	}
	removed := map[[2]string]*llmflow.Unwritten{}
	reason := map[[2]string]string{}
	for _, u := range un {
		reason[[2]string{u.Account, u.User}] = u.Reason
	}
	out := make([]llmflow.AssocHour, 0, len(rows))
	for _, r := range rows {
		k := key{r.Hour.Unix(), r.Account, r.User}
		d := min(drop[k], r.AllocSecs)
		if d > 0 {
			drop[k] -= d
			a := [2]string{r.Account, r.User}
			if removed[a] == nil {
				removed[a] = &llmflow.Unwritten{AssocHour: llmflow.AssocHour{Account: r.Account, User: r.User}, Reason: reason[a]}
			}
			removed[a].AllocSecs += d
			r.AllocSecs -= d
		}
		if r.AllocSecs > 0 {
			out = append(out, r)
		}
	}
	var gone []llmflow.Unwritten
	for _, a := range slices.SortedFunc(maps.Keys(removed), func(x, y [2]string) int {
		return cmp.Or(strings.Compare(x[0], y[0]), strings.Compare(x[1], y[1]))
	}) {
		gone = append(gone, *removed[a])
	}
	return out, gone
}

// SortAssocs puts d's user associations in slurmdbd's order where order
// (a write-back cluster's lft per association) has them: sreport lists in
// lft order (TopUsage group joins a user's accounts in it), and sacctmgr
// puts a sibling added later first, so it can differ from llmflow's tree
// order. Associations order lacks keep their order, after those it has.
func (d *Data) SortAssocs(order []llmflow.AssocLFT) {
	if len(order) == 0 {
		return
	}
	lft := make(map[[2]string]int64, len(order))
	for _, o := range order {
		lft[[2]string{o.Account, o.User}] = o.LFT
	}
	perm := make([]int, len(d.Assocs)) // new position → old index
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(x, y int) int {
		lx, okx := lft[[2]string{d.Assocs[x].Account, d.Assocs[x].User}]
		ly, oky := lft[[2]string{d.Assocs[y].Account, d.Assocs[y].User}]
		switch {
		case okx && oky:
			return cmp.Compare(lx, ly)
		case okx:
			return -1
		case oky:
			return 1
		}
		return 0
	})
	newIdx := make([]int, len(perm)) // old index → new position
	assocs := make([]Assoc, len(perm))
	for n, old := range perm {
		newIdx[old] = n
		assocs[n] = d.Assocs[old]
	}
	d.Assocs = assocs
	for g := range d.Usage {
		for i := range d.Usage[g] {
			d.Usage[g][i].Assoc = newIdx[d.Usage[g][i].Assoc]
		}
		slices.SortFunc(d.Usage[g], func(a, b UsageRow) int {
			return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Assoc, b.Assoc), strings.Compare(a.TRES, b.TRES))
		})
	}
}
