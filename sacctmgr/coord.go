package sacctmgr

import (
	"bytes"
	"cmp"
	"io"
	"slices"
	"strings"
)

// Coord is a Slurm account coordinator (`sacctmgr add coordinator
// account=A names=U`): user U may manage account A and every account under
// it. Slurm keeps coordinators per account, for every cluster at once
// (acct_coord_table has no cluster).
type Coord struct {
	User    string
	Account string
}

// SortCoords sorts coordinators by user, then account, and removes
// duplicates.
func SortCoords(cs []Coord) []Coord {
	slices.SortFunc(cs, func(a, b Coord) int {
		return cmp.Or(strings.Compare(a.User, b.User), strings.Compare(a.Account, b.Account))
	})
	return slices.Compact(cs)
}

// ParseCoordinators parses the coordinators sacctmgr lists, in either of
// its two views, --parsable2 (-P) or --parsable (-p), with the header line
// (columns are found by name):
//
//	sacctmgr -P show user withcoord [format=User,Coord]       User … Coord Accounts: the accounts a user coordinates
//	sacctmgr -P show account withcoord [format=Account,Coord] Account … Coord Accounts: the users coordinating an account
//
// Both views show more than the coordinators slurmdbd stores: a
// coordinator of an account is listed on its sub-accounts too (the account
// view even lists a user once per level it inherits from). The pairs
// returned are every (user, account) the listing shows, lower-cased,
// sorted and without duplicates; slurmsync reduces them to the top-most
// accounts, which is what slurmdbd's own rows reduce to as well.
//
// The free-text columns of the default account view (Descr, Org) may hold
// an unescaped '|': the user or account column is read from the start of
// the line and Coord Accounts from its end, so the extra fields fall
// between them. A listing without a header (-n) or without the two
// columns is an error, as is a name with spaces or control characters.
// Errors are *ParseError.
func ParseCoordinators(r io.Reader) ([]Coord, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	var (
		out          []Coord
		header       []string
		keyAt, coord int // key column from the start, Coord Accounts from the end
		userView     bool
		parsable     bool // -p: a '|' ends every line
	)
	lineNo := 0
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		lineNo++
		s := strings.TrimRight(string(line), "\r")
		if strings.TrimSpace(s) == "" {
			continue
		}
		if header == nil {
			parsable = strings.HasSuffix(s, "|")
			header = strings.Split(strings.TrimSuffix(s, "|"), "|")
			keyAt, coord = -1, -1
			for i, h := range header {
				switch strings.TrimSpace(h) {
				case "User":
					if keyAt < 0 || !userView {
						keyAt, userView = i, true
					}
				case "Account":
					if keyAt < 0 {
						keyAt = i
					}
				case "Coord Accounts":
					coord = len(header) - i
				}
			}
			if coord < 0 || keyAt < 0 {
				return nil, errorf(lineNo, "want the header line of `sacctmgr -P show user withcoord` "+
					"(User and Coord Accounts columns) or `sacctmgr -P show account withcoord` (Account and Coord Accounts); "+
					"print it without -n/--noheader")
			}
			if len(header)-coord <= keyAt {
				return nil, errorf(lineNo, "the Coord Accounts column comes before the %s column: use format=%s,Coord",
					header[keyAt], header[keyAt])
			}
			continue
		}
		if parsable {
			s = strings.TrimSuffix(s, "|")
		}
		f := strings.Split(s, "|")
		if len(f) < len(header) {
			return nil, errorf(lineNo, "%d fields, the header has %d columns (not a -P/-p listing?)", len(f), len(header))
		}
		key := strings.ToLower(strings.TrimSpace(f[keyAt]))
		if !coordName(key) {
			return nil, errorf(lineNo, "invalid name %q", f[keyAt])
		}
		list := strings.TrimSpace(f[len(f)-coord])
		if list == "" {
			continue
		}
		for _, n := range strings.Split(list, ",") {
			n = strings.ToLower(strings.TrimSpace(n))
			if !coordName(n) {
				return nil, errorf(lineNo, "invalid name %q in Coord Accounts", n)
			}
			if userView {
				out = append(out, Coord{User: key, Account: n})
			} else {
				out = append(out, Coord{User: n, Account: key})
			}
		}
	}
	if header == nil {
		return nil, errorf(0, "empty coordinator listing: want the output of `sacctmgr -P show user withcoord` with its header line")
	}
	return SortCoords(out), nil
}

// coordName reports whether s can be a Slurm user or account name as a
// coordinator listing shows it: not empty, no spaces, separators or
// control characters.
func coordName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || c == '|' || c == ',' || c == '=' {
			return false
		}
	}
	return true
}
