package sacctmgr

import (
	"strings"

	"github.com/go-llmflow/llmflow"
)

// Slurm creates a cluster's root account with these (as_mysql_add_clusters);
// the dump has no Account line for root, so ParseDump fills them in.
const (
	rootDescription  = "default root account"
	rootOrganization = "root"
)

// ParseDump parses the file written by "sacctmgr dump <cluster> file=…"
// (the format "sacctmgr load" reads):
//
//	Cluster - 'hgx':Fairshare=1:QOS='normal'
//	Parent - 'root'
//	User - 'root':DefaultAccount='root':AdminLevel='Administrator':Fairshare=0
//	Account - 'etaba':Description='etablissement a':Organization='etaba':Fairshare=13
//	Parent - 'etaba'
//	…
//	User - 'carol':Partition='gpu':DefaultAccount='lab-chem':Fairshare=50
//
// The Cluster line carries the root association's limits (its Fairshare is
// root's Shares); every Account and User line belongs to the last Parent
// line, which must name root or an account defined above it. Values may be
// quoted with ' (a quote ends at a ' followed by ':' or the end of the
// line); keys are case-insensitive; keys other than Description,
// Organization, Fairshare, DefaultAccount, Partition, GrpTRESMins and
// GrpTRES are ignored; Fairshare defaults to 1 (sacctmgr load's default)
// and 2147483647 means parent. GrpTRESMins and GrpTRES, which sacctmgr
// writes with TRES names (print_file_add_limits_to_line:
// GrpTRES=cpu=64,gres/gpu=16), give an account's Limits (the Cluster
// line's, root's), as Options.Limits does for listings; a TRES string
// that does not parse is an error naming the line. '#' starts a comment
// line. Errors are *ParseError.
func ParseDump(data []byte) (*Tree, error) {
	ls := lines{data: data}
	var (
		t        *Tree
		parent   string
		acctLine []int
		userLine []int
		defAcct  []string
		accounts = map[string]bool{}
	)
	for {
		line, num, ok := ls.next()
		if !ok {
			break
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		kind, name, fields, err := parseDumpLine(line, num)
		if err != nil {
			return nil, err
		}
		if t == nil && kind != "cluster" {
			return nil, errorf(num, "%s line before the Cluster line", kind)
		}
		shares, useParent := uint32(1), false
		if v, ok := fields["fairshare"]; ok {
			if shares, useParent, err = parseShares(strings.TrimSpace(v), num); err != nil {
				return nil, err
			}
		}
		var limits llmflow.GPULimits
		if kind == "cluster" || kind == "account" {
			if limits, err = GPULimits(fields["grptresmins"], fields["grptres"], GPUTRES); err != nil {
				return nil, errorf(num, "%s %q: %v", kind, name, err)
			}
		}
		switch kind {
		case "cluster":
			if t != nil {
				return nil, errorf(num, "second Cluster line (one cluster a dump)")
			}
			t = &Tree{Cluster: name}
			t.Accounts = append(t.Accounts, Account{
				Name: "root", Description: rootDescription, Organization: rootOrganization,
				Shares: shares, UseParent: useParent, Limits: limits,
			})
			acctLine = append(acctLine, num)
			accounts["root"] = true
		case "parent":
			if !accounts[name] {
				return nil, errorf(num, "Parent %q is not an account defined above", name)
			}
			parent = name
		case "account":
			if parent == "" {
				return nil, errorf(num, "Account line before any Parent line")
			}
			if accounts[name] {
				return nil, errorf(num, "account %q defined twice", name)
			}
			accounts[name] = true
			t.Accounts = append(t.Accounts, Account{
				Name: name, Parent: parent,
				Description: fields["description"], Organization: fields["organization"],
				Shares: shares, UseParent: useParent, Limits: limits,
			})
			acctLine = append(acctLine, num)
		case "user":
			if parent == "" {
				return nil, errorf(num, "User line before any Parent line")
			}
			t.Users = append(t.Users, User{
				Name: name, Account: parent,
				Partition: strings.ToLower(strings.TrimSpace(fields["partition"])),
				Shares:    shares, UseParent: useParent,
			})
			defAcct = append(defAcct, strings.ToLower(strings.TrimSpace(fields["defaultaccount"])))
			userLine = append(userLine, num)
		default:
			return nil, errorf(num, "unknown record %q (want Cluster, Parent, Account or User)", kind)
		}
	}
	if t == nil {
		return nil, errorf(0, "no Cluster line: not a sacctmgr dump")
	}
	if err := check(t, acctLine, userLine, false); err != nil {
		return nil, err
	}
	has := make(map[userKey]bool, len(t.Users))
	for _, u := range t.Users {
		has[userKey{u.Name, u.Account, u.Partition}] = true
	}
	for i := range t.Users {
		u := &t.Users[i]
		u.Default = defAcct[i] == u.Account && (u.Partition == "" || !has[userKey{u.Name, u.Account, ""}])
	}
	t.Sort()
	return t, nil
}

// parseDumpLine splits "Kind - 'name':Key=Value:Key='Value'…". Kind and
// keys come back lower-cased, as does the name.
func parseDumpLine(line string, num int) (kind, name string, fields map[string]string, err error) {
	i := strings.Index(line, " - ")
	if i < 0 {
		return "", "", nil, errorf(num, "not a dump record (want Kind - 'name'…)")
	}
	kind = strings.ToLower(strings.TrimSpace(line[:i]))
	rest := strings.TrimLeft(line[i+3:], " ")
	name, rest, err = dumpValue(rest, num)
	if err != nil {
		return "", "", nil, err
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", "", nil, errorf(num, "%s with an empty name", kind)
	}
	fields = map[string]string{}
	for rest != "" {
		if rest[0] != ':' {
			return "", "", nil, errorf(num, "want ':' before %q", rest)
		}
		rest = rest[1:]
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return "", "", nil, errorf(num, "want Key=Value, got %q", rest)
		}
		key := strings.ToLower(strings.TrimSpace(rest[:eq]))
		var v string
		if v, rest, err = dumpValue(rest[eq+1:], num); err != nil {
			return "", "", nil, err
		}
		fields[key] = v
	}
	return kind, name, fields, nil
}

// dumpValue reads one value, quoted or up to the next ':'.
func dumpValue(s string, num int) (v, rest string, err error) {
	if strings.HasPrefix(s, "'") {
		for j := 1; j < len(s); j++ {
			if s[j] == '\'' && (j+1 == len(s) || s[j+1] == ':') {
				return s[1:j], s[j+1:], nil
			}
		}
		return "", "", errorf(num, "unterminated quote in %q", s)
	}
	if j := strings.IndexByte(s, ':'); j >= 0 {
		return s[:j], s[j:], nil
	}
	return s, "", nil
}
