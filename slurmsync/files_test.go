package slurmsync

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListingFiles: which --file is which listing, told by content; each
// wrong combination is refused with the files named; a single listing is
// told by content (never by name), refused when it can only be a
// withdeleted one, and warned about when its content cannot tell.
func TestListingFiles(t *testing.T) {
	dir := captures + "/sacctmgr/"
	plain, withDel, coord := dir+"assoc.format.psv", dir+"assoc.format.withdeleted.psv", dir+"user.withcoord.psv"
	tmp := t.TempDir()
	lonely := filepath.Join(tmp, "assoc.withdeleted.psv")
	b, err := os.ReadFile(withDel)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(lonely, b, 0o600)
	dump := filepath.Join(tmp, "hgx.cfg")
	os.WriteFile(dump, []byte("Cluster - 'hgx':Fairshare=1\nParent - 'root'\nAccount - 'a':Fairshare=1\n"), 0o600)

	twice := filepath.Join(tmp, "twice.psv") // an association deleted, then added again: only withdeleted lists it twice
	os.WriteFile(twice, append(b, []byte("hgx|lab-old|erin||1||19|21|41|42|normal||||||||||\n")...), 0o600)

	for _, tc := range []struct {
		name     string
		files    []string
		declared ListingKind
		want     map[Listing]string
		err      string
		warn     string
	}{
		{name: "plain", files: []string{plain}, want: map[Listing]string{Assocs: plain}},
		{name: "both, any order", files: []string{plain, withDel}, want: map[Listing]string{Assocs: withDel, LiveAssocs: plain}},
		{name: "both and coordinators", files: []string{coord, withDel, plain},
			want: map[Listing]string{Assocs: withDel, LiveAssocs: plain, Coordinators: coord}},
		{name: "withdeleted alone: its content cannot tell", files: []string{lonely}, want: map[Listing]string{Assocs: lonely}, warn: "its content cannot tell"},
		{name: "said plain", files: []string{lonely}, declared: ListingPlain, want: map[Listing]string{Assocs: lonely}},
		{name: "said withdeleted", files: []string{lonely}, declared: ListingWithDeleted, err: "alone it cannot tell deleted associations"},
		{name: "an association twice: withdeleted by content", files: []string{twice}, err: "is a `sacctmgr show assoc withdeleted` listing"},
		{name: "an association twice, said plain", files: []string{twice}, declared: ListingPlain, err: "lists an association twice"},
		{name: "plain by its holes, said withdeleted", files: []string{plain}, declared: ListingWithDeleted, err: "it is the plain listing"},
		{name: "said, with two", files: []string{plain, withDel}, declared: ListingPlain, err: "--listing says what a single"},
		{name: "coordinators alone", files: []string{coord}, err: "is a coordinator listing: pass the association listing too"},
		{name: "two coordinator listings", files: []string{coord, coord, plain}, err: "are both coordinator listings"},
		{name: "a dump in a pair", files: []string{dump, plain}, err: "is a sacctmgr dump file: pass it alone"},
		{name: "the same listing twice", files: []string{plain, plain}, err: "hold the same listing"},
		{name: "three listings", files: []string{plain, plain, withDel}, err: "3 association listings"},
		{name: "missing", files: []string{filepath.Join(tmp, "nope.psv")}, err: "nope.psv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warn strings.Builder
			got, err := ListingFiles(tc.files, tc.declared, &warn)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("listing %v: %q, want %q", k, got[k], v)
				}
			}
			if !strings.Contains(warn.String(), tc.warn) || (tc.warn == "" && warn.Len() > 0) {
				t.Errorf("warning %q, want %q", warn.String(), tc.warn)
			}
		})
	}
}
