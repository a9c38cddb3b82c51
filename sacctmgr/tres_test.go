package sacctmgr_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

func TestParseTRES(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []sacctmgr.TRESCount
		err  string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"gres/gpu=16", []sacctmgr.TRESCount{{Name: "gres/gpu", Count: 16}}, ""},
		{"cpu=100,gres/gpu=40,mem=100G", []sacctmgr.TRESCount{{Name: "cpu", Count: 100}, {Name: "gres/gpu", Count: 40}, {Name: "mem", Count: 100, Unit: 'G'}}, ""},
		{"1=100,1001=40", []sacctmgr.TRESCount{{Name: "1", Count: 100}, {Name: "1001", Count: 40}}, ""},
		{"GRES/GPU:A100=8", []sacctmgr.TRESCount{{Name: "gres/gpu:a100", Count: 8}}, ""},
		{"gres/gpu=-1", []sacctmgr.TRESCount{{Name: "gres/gpu", Count: -1}}, ""},
		{"gres/gpu=INFINITE", []sacctmgr.TRESCount{{Name: "gres/gpu", Count: -1}}, ""},
		{"gres/gpu=0", []sacctmgr.TRESCount{{Name: "gres/gpu", Count: 0}}, ""},
		{"gres/gpu", nil, "want name=count"},
		{"=4", nil, "invalid name"},
		{"gres gpu=4", nil, "invalid name"},
		{"gres/gpu=4,gres/gpu=5", nil, "given twice"},
		{"gres/gpu=", nil, "no count"},
		{"gres/gpu=-2", nil, "whole number"},
		{"gres/gpu=4.5", nil, "whole number"},
		{"gres/gpu=0x10", nil, "whole number"},
		{"gres/gpu=99999999999999999999", nil, "larger than"},
		{"gres/gpu=4,,cpu=1", nil, "want name=count"},
		{"mem=G", nil, "whole number"},
	} {
		got, err := sacctmgr.ParseTRES(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTRES(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, tc.want) {
			t.Errorf("ParseTRES(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestGPULimitsOf(t *testing.T) {
	for _, tc := range []struct {
		mins, tres, gpu string
		want            llmflow.GPULimits
		err             string
	}{
		{"", "", sacctmgr.GPUTRES, llmflow.GPULimits{}, ""},
		{"gres/gpu=6000", "cpu=64,gres/gpu=8", sacctmgr.GPUTRES, llmflow.GPULimits{Minutes: 6000, HasMinutes: true, GPUs: 8, HasGPUs: true}, ""},
		{"cpu=6000", "gres/gpu:a100=8", sacctmgr.GPUTRES, llmflow.GPULimits{}, ""}, // typed gres is not the total
		{"1001=600", "1=4,1001=2", "1001", llmflow.GPULimits{Minutes: 600, HasMinutes: true, GPUs: 2, HasGPUs: true}, ""},
		{"gres/gpu=-1", "gres/gpu=0", sacctmgr.GPUTRES, llmflow.GPULimits{HasGPUs: true}, ""},
		{"gres/gpu=6G", "", sacctmgr.GPUTRES, llmflow.GPULimits{}, "GrpTRESMins: TRES gres/gpu=6G: a GPU count has no unit"},
		{"", "gres/gpu", sacctmgr.GPUTRES, llmflow.GPULimits{}, "GrpTRES: "},
	} {
		got, err := sacctmgr.GPULimits(tc.mins, tc.tres, tc.gpu)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("GPULimits(%q, %q) = %v, %v; want error %q", tc.mins, tc.tres, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("GPULimits(%q, %q) = %+v, %v; want %+v", tc.mins, tc.tres, got, err, tc.want)
		}
	}
}

// TestParseLimits: with Options.Limits the real captures give etabb its
// GrpTRES=gres/gpu=16 (and no one else a limit: user rows and MaxTRES are
// not group limits); without it, nothing.
func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		file string
		opts sacctmgr.Options
	}{
		{"assoc.format.psv", sacctmgr.Options{Limits: true}},
		{"assoc.format.withdeleted.psv", sacctmgr.Options{Limits: true}},
		{"assoc.tree.psv", sacctmgr.Options{Limits: true}},
		{"assoc.format.noheader.psv", sacctmgr.Options{Columns: formatColumns, Limits: true}},
		{"assoc.psv", sacctmgr.Options{Partial: true, Limits: true}},
		{"assoc.parsable1.txt", sacctmgr.Options{Partial: true, Limits: true}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			tr := mustParse(t, tc.file, tc.opts)
			got := map[string]llmflow.GPULimits{}
			for _, a := range tr.Accounts {
				if !a.Limits.IsZero() {
					got[a.Name] = a.Limits
				}
			}
			want := map[string]llmflow.GPULimits{"etabb": {GPUs: 16, HasGPUs: true}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
			tc.opts.Limits = false
			for _, a := range mustParse(t, tc.file, tc.opts).Accounts {
				if !a.Limits.IsZero() {
					t.Errorf("without Options.Limits: %s has %v", a.Name, a.Limits)
				}
			}
		})
	}
	bad := "Account|User|Share|ParentName|GrpTRESMins|GrpTRES\nroot||1|||\nx||1|root|gres/gpu=lots|\n"
	_, err := sacctmgr.ParseAssociations(bytes.NewReader([]byte(bad)), sacctmgr.Options{Limits: true})
	if err == nil || !strings.Contains(err.Error(), "line 3: account \"x\": GrpTRESMins") {
		t.Errorf("bad GrpTRESMins: %v", err)
	}
}

// FuzzParseTRES: any input parses or fails cleanly; what parses formats
// back to a string that parses to the same entries, and GPUCount agrees
// with the entries.
func FuzzParseTRES(f *testing.F) {
	for _, s := range []string{"", "gres/gpu=16", "cpu=100,gres/gpu=40,mem=100G", "1=100,1001=40", "gres/gpu=INFINITE",
		"gres/gpu:a100=8,gres/gpu=2", "gres/gpu=-1", "billing=1,node=2", "a=1,a=2", "x=18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := sacctmgr.ParseTRES(s)
		if err != nil {
			if cs != nil {
				t.Fatalf("entries with an error: %v", cs)
			}
			if _, _, gerr := sacctmgr.GPUCount(s, sacctmgr.GPUTRES); gerr == nil {
				t.Fatalf("GPUCount accepted what ParseTRES refused: %q", s)
			}
			return
		}
		again, err := sacctmgr.ParseTRES(sacctmgr.FormatTRES(cs))
		if err != nil || !cmp.Equal(cs, again) {
			t.Fatalf("round trip of %q: %v → %q → %v, %v", s, cs, sacctmgr.FormatTRES(cs), again, err)
		}
		n, ok, err := sacctmgr.GPUCount(s, sacctmgr.GPUTRES)
		var want *sacctmgr.TRESCount
		for i := range cs {
			if cs[i].Name == sacctmgr.GPUTRES {
				want = &cs[i]
			}
		}
		switch {
		case want == nil:
			if ok || err != nil || n != 0 {
				t.Fatalf("no gres/gpu in %q, yet %d %v %v", s, n, ok, err)
			}
		case want.Unit != 0:
			if err == nil {
				t.Fatalf("a GPU count with a unit accepted: %q", s)
			}
		case want.Count < 0:
			if ok || err != nil {
				t.Fatalf("INFINITE is no limit: %q gave %d %v %v", s, n, ok, err)
			}
		default:
			if !ok || err != nil || n != want.Count || n < 0 {
				t.Fatalf("%q: GPUCount %d %v %v, entry %v", s, n, ok, err, *want)
			}
		}
	})
}
