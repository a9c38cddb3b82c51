package slurmsync

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// ListingFiles maps the --file arguments to the listings they hold: one
// file is the plain `sacctmgr show assoc` listing (or a `sacctmgr dump`
// file); two are that listing and the same with withdeleted, told apart by
// content (the withdeleted one holds every row of the other). A
// withdeleted listing alone cannot tell deleted associations from live
// ones: a file that looks like one gets a warning.
//
// A file whose header has a Coord Accounts column is the coordinator
// listing (`sacctmgr -P show user withcoord`, or `show account withcoord`),
// given next to the others: without it the import does not know the
// coordinators and changes no role.
func ListingFiles(files []string, warn io.Writer) (map[Listing]string, error) {
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
	m, err := assocFiles(rest, warn)
	if err == nil && coord != "" {
		m[Coordinators] = coord
	}
	return m, err
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
func assocFiles(files []string, warn io.Writer) (map[Listing]string, error) {
	switch len(files) {
	case 1:
		if warn != nil && strings.Contains(strings.ToLower(files[0]), "withdeleted") {
			fmt.Fprintf(warn, "warning: %s looks like a `sacctmgr show assoc withdeleted` listing: alone it cannot tell deleted "+
				"associations from live ones, which are then imported as live; pass the plain listing, or both (--file twice)\n", files[0])
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
