package slurmsync

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ListingFiles maps the --file arguments to the listings they hold: one
// file is the plain `sacctmgr show assoc` listing (or a `sacctmgr dump`
// file); two are that listing and the same with withdeleted, told apart by
// content (the withdeleted one holds every row of the other).
//
// A withdeleted listing alone cannot tell deleted associations from live
// ones (sacctmgr marks none), so a single listing is classified by its
// content, never by its name (ClassifyListing): one that shows deleted
// rows missing is the plain listing; one that can only be a withdeleted
// listing is refused; one whose content cannot tell is taken as the plain
// listing with a warning, unless the admin said what it is (declared:
// ListingPlain; ListingWithDeleted is refused, as alone it would import
// deleted rows as live).
//
// A file whose header has a Coord Accounts column is the coordinator
// listing (`sacctmgr -P show user withcoord`, or `show account withcoord`),
// given next to the others: without it the import does not know the
// coordinators and changes no role.
func ListingFiles(files []string, declared ListingKind, warn io.Writer) (map[Listing]string, error) {
	var coord string
	var rest []string
	for _, f := range files {
		isCoord, err := coordListing(f)
		if err != nil {
			return nil, err
		}
		switch {
		case isCoord && coord != "":
			return nil, fmt.Errorf("--file %s and %s are both coordinator listings: pass one", coord, f)
		case isCoord:
			coord = f
		default:
			rest = append(rest, f)
		}
	}
	if coord != "" && len(rest) == 0 {
		return nil, fmt.Errorf("--file %s is a coordinator listing: pass the association listing too", coord)
	}
	if declared != ListingUnknown && len(rest) != 1 {
		return nil, fmt.Errorf("--listing says what a single association listing is: with %d, drop it (two are told apart by content)", len(rest))
	}
	m, err := assocFiles(rest, declared, warn)
	if err == nil && coord != "" {
		m[Coordinators] = coord
	}
	return m, err
}

// ListingKind is what an association listing is: `sacctmgr show assoc`
// (plain) or the same with withdeleted.
type ListingKind int

const (
	ListingUnknown     ListingKind = iota // its content cannot tell
	ListingPlain                          // live associations only
	ListingWithDeleted                    // deleted associations too, unmarked
)

// ParseListingKind parses --listing's value ("" is ListingUnknown).
func ParseListingKind(s string) (ListingKind, error) {
	switch s {
	case "":
		return ListingUnknown, nil
	case "plain":
		return ListingPlain, nil
	case "withdeleted":
		return ListingWithDeleted, nil
	}
	return ListingUnknown, fmt.Errorf("--listing %q: want plain or withdeleted", s)
}

// ClassifyListing tells from a listing's content what it is, where the
// content allows: with the LFT and RGT columns, a plain listing of a
// cluster with deleted associations has holes in its nested set (slurmdbd
// keeps a deleted association's lft and rgt), which a withdeleted listing
// never has; an association (cluster, account, user, partition) listed
// twice (deleted, then added again) is only ever in a withdeleted
// listing. Otherwise (no LFT and RGT, a complete nested set: nothing
// deleted, or a withdeleted listing) it returns ListingUnknown.
func ClassifyListing(data []byte) ListingKind {
	lines := strings.Split(strings.ReplaceAll(string(data), "\r", ""), "\n")
	if len(lines) == 0 {
		return ListingUnknown
	}
	col := map[string]int{}
	for i, c := range strings.Split(strings.TrimSuffix(lines[0], "|"), "|") {
		col[strings.ToLower(strings.TrimSpace(c))] = i
	}
	if _, ok := col["account"]; !ok {
		return ListingUnknown // no header (-n), or not an association listing
	}
	if _, ok := col["user"]; !ok {
		return ListingUnknown
	}
	get := func(f []string, name string) (string, bool) {
		i, ok := col[name]
		if !ok || i >= len(f) {
			return "", false
		}
		return strings.TrimSpace(f[i]), true
	}
	seen := map[string]bool{}
	type set struct {
		rows   int
		maxRGT int
		used   map[int]bool
	}
	sets := map[string]*set{}
	_, nested := col["lft"]
	if _, ok := col["rgt"]; !ok {
		nested = false
	}
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		f := strings.Split(l, "|")
		cl, _ := get(f, "cluster")
		acct, _ := get(f, "account")
		user, _ := get(f, "user")
		part, _ := get(f, "partition")
		k := strings.Join([]string{cl, acct, user, part}, "|")
		if seen[k] {
			return ListingWithDeleted
		}
		seen[k] = true
		if !nested {
			continue
		}
		ls, _ := get(f, "lft")
		rs, _ := get(f, "rgt")
		lft, err1 := strconv.Atoi(ls)
		rgt, err2 := strconv.Atoi(rs)
		if err1 != nil || err2 != nil {
			nested = false // not a nested set we can read
			continue
		}
		s := sets[cl]
		if s == nil {
			s = &set{used: map[int]bool{}}
			sets[cl] = s
		}
		s.rows++
		s.maxRGT = max(s.maxRGT, rgt)
		s.used[lft], s.used[rgt] = true, true
	}
	if !nested {
		return ListingUnknown
	}
	for _, s := range sets {
		// root's rgt is 2 × the associations; every number is used once
		if s.maxRGT > 2*s.rows || len(s.used) < 2*s.rows {
			return ListingPlain
		}
	}
	return ListingUnknown
}

// coordListing reports whether the file's header line has the Coord
// Accounts column of `sacctmgr show user withcoord`.
func coordListing(file string) (bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return false, fmt.Errorf("--file: %w", err)
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	line, _, _ := strings.Cut(string(head[:n]), "\n")
	return slices.Contains(strings.Split(strings.TrimRight(line, "|\r"), "|"), "Coord Accounts"), nil
}

// assocFiles maps the association listings among the --file arguments.
func assocFiles(files []string, declared ListingKind, warn io.Writer) (map[Listing]string, error) {
	switch len(files) {
	case 1:
		b, err := os.ReadFile(files[0])
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		kind, found := declared, ClassifyListing(b)
		if IsDump(b) {
			kind, found = ListingPlain, ListingPlain // sacctmgr dump lists no deleted association
		}
		switch {
		case found == ListingWithDeleted && kind == ListingPlain:
			return nil, fmt.Errorf("--file %s lists an association twice: it is a withdeleted listing, not the plain one --listing says", files[0])
		case found == ListingPlain && kind == ListingWithDeleted:
			return nil, fmt.Errorf("--file %s misses deleted associations (holes in its LFT/RGT): it is the plain listing, not the withdeleted one --listing says", files[0])
		case found != ListingUnknown:
			kind = found
		}
		switch kind {
		case ListingWithDeleted:
			return nil, fmt.Errorf("--file %s is a `sacctmgr show assoc withdeleted` listing: alone it cannot tell deleted associations "+
				"from live ones, which would be imported as live; pass the plain listing too (--file twice), or the plain one alone", files[0])
		case ListingUnknown:
			if warn != nil {
				fmt.Fprintf(warn, "warning: %s is taken as the plain `sacctmgr show assoc` listing, but its content cannot tell: "+
					"were it a withdeleted listing, its deleted associations would be imported as live; say --listing plain, "+
					"list LFT,RGT (a plain listing then shows its deleted rows missing), or pass both listings\n", files[0])
			}
		}
		return map[Listing]string{Assocs: files[0]}, nil
	case 2:
		var data [2][]byte
		for i, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("--file: %w", err)
			}
			if IsDump(b) {
				return nil, fmt.Errorf("--file %s is a sacctmgr dump file: pass it alone", f)
			}
			data[i] = b
		}
		if bytes.Equal(data[0], data[1]) {
			return nil, fmt.Errorf("--file %s and %s hold the same listing: pass the plain and the withdeleted one", files[0], files[1])
		}
		first, err := WithDeletedFirst(data[0], data[1])
		if err != nil {
			return nil, fmt.Errorf("--file %s and %s: %w", files[0], files[1], err)
		}
		all, live := files[0], files[1]
		if !first {
			all, live = live, all
		}
		return map[Listing]string{Assocs: all, LiveAssocs: live}, nil
	}
	return nil, fmt.Errorf("--file: %d association listings: pass one sacctmgr listing (or dump file), or the plain and the withdeleted listing "+
		"(and the coordinator listing)", len(files))
}
