package sacctmgr

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-llmflow/llmflow"
)

// TRESCount is one entry of a TRES string ("gres/gpu=40"): a trackable
// resource and its count.
type TRESCount struct {
	// Name is the TRES as written: "type" or "type/name" in sacctmgr's
	// output ("cpu", "gres/gpu", "gres/gpu:a100"), the TRES id in
	// slurmdbd's tables ("1001").
	Name string
	// Count is the count, scaled by Unit; -1 is Slurm's INFINITE (no
	// limit: "-1", "INFINITE", "UNLIMITED").
	Count int64
	// Unit is the suffix of a count sacctmgr prints with a unit (memory:
	// "mem=100G"), 0 for none; Count is then the number before it.
	Unit byte
}

// GPUTRES is the TRES of GPUs: the gres "gpu", without a type.
const GPUTRES = "gres/gpu"

// maxTRESCount bounds a count: Slurm keeps them in uint64 but a limit of
// more than 2^62 GPU-minutes means none.
const maxTRESCount = 1 << 62

// ParseTRES parses a TRES string as sacctmgr prints it and slurmdbd
// stores it: "name=count" entries separated by commas ("cpu=100,
// gres/gpu=40,mem=100G"; in the database "1=100,1001=40"). An empty
// string is no entry. Names are lower-cased; a name may not repeat.
// Errors name the offending entry, never more than 64 bytes of it.
func ParseTRES(s string) ([]TRESCount, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []TRESCount
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(entry), "=")
		name = strings.ToLower(strings.TrimSpace(name))
		val = strings.TrimSpace(val)
		switch {
		case !ok:
			return nil, fmt.Errorf("TRES entry %q: want name=count", short(entry))
		case name == "" || strings.ContainsFunc(name, badTRESRune):
			return nil, fmt.Errorf("TRES entry %q: invalid name", short(entry))
		case seen[name]:
			return nil, fmt.Errorf("TRES %q given twice", short(name))
		}
		seen[name] = true
		c, err := parseTRESCount(val)
		if err != nil {
			return nil, fmt.Errorf("TRES entry %q: %v", short(entry), err)
		}
		c.Name = name
		out = append(out, c)
	}
	return out, nil
}

func badTRESRune(r rune) bool {
	return r <= ' ' || r == 0x7f || r == '=' || r == ',' || r == '|' || r >= 0x80
}

func parseTRESCount(v string) (TRESCount, error) {
	switch strings.ToUpper(v) {
	case "-1", "INFINITE", "UNLIMITED":
		return TRESCount{Count: -1}, nil
	case "":
		return TRESCount{}, fmt.Errorf("no count")
	}
	var c TRESCount
	if last := v[len(v)-1]; strings.IndexByte("KMGTP", last) >= 0 {
		c.Unit, v = last, v[:len(v)-1]
	}
	if v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return TRESCount{}, fmt.Errorf("count is not a whole number ≥ 0")
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > maxTRESCount {
		return TRESCount{}, fmt.Errorf("count is larger than %d", int64(maxTRESCount))
	}
	c.Count = int64(n)
	return c, nil
}

// FormatTRES writes cs back as a TRES string, in order.
func FormatTRES(cs []TRESCount) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Name)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(c.Count, 10))
		if c.Unit != 0 {
			b.WriteByte(c.Unit)
		}
	}
	return b.String()
}

// GPUCount returns the gres/gpu count of a TRES string (name is GPUTRES,
// or the id of gres/gpu for slurmdbd's form): ok is false when the string
// sets none or sets it INFINITE. A GPU count with a unit is an error.
func GPUCount(tres, name string) (n int64, ok bool, err error) {
	cs, err := ParseTRES(tres)
	if err != nil {
		return 0, false, err
	}
	for _, c := range cs {
		if c.Name != name {
			continue
		}
		switch {
		case c.Unit != 0:
			return 0, false, fmt.Errorf("TRES %s=%d%c: a GPU count has no unit", name, c.Count, c.Unit)
		case c.Count < 0:
			return 0, false, nil
		}
		return c.Count, true, nil
	}
	return 0, false, nil
}

// GPULimits reads the gres/gpu counts of an association's GrpTRESMins and
// GrpTRES strings (gpu names the GPU TRES as the strings do: GPUTRES, or
// its id in slurmdbd's tables).
func GPULimits(grpTRESMins, grpTRES, gpu string) (llmflow.GPULimits, error) {
	var l llmflow.GPULimits
	var err error
	if l.Minutes, l.HasMinutes, err = GPUCount(grpTRESMins, gpu); err != nil {
		return llmflow.GPULimits{}, fmt.Errorf("GrpTRESMins: %w", err)
	}
	if l.GPUs, l.HasGPUs, err = GPUCount(grpTRES, gpu); err != nil {
		return llmflow.GPULimits{}, fmt.Errorf("GrpTRES: %w", err)
	}
	return l, nil
}

// short cuts s to 64 bytes for an error message.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
