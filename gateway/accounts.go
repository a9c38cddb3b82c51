package gateway

import (
	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/fairshare"
)

// accountView is an immutable index of an organisation tree, swapped
// atomically when the tree changes (a Slurm sync).
type accountView struct {
	accts  llmflow.Accounts
	byName map[string]*llmflow.Account
	salts  map[string]string // organisation → cache_salt
}

func newAccountView(accts llmflow.Accounts, saltKey string) *accountView {
	v := &accountView{
		accts:  accts,
		byName: make(map[string]*llmflow.Account, len(accts)),
		salts:  make(map[string]string),
	}
	for i := range v.accts {
		a := &v.accts[i]
		v.byName[a.Name] = a
		if a.Kind == llmflow.KindOrg {
			v.salts[a.Name] = cacheSalt(saltKey, a.Name)
		}
	}
	return v
}

// team returns the team named name, enabled or not (the caller checks
// Disabled); its organisation is its Parent.
func (v *accountView) team(name string) (*llmflow.Account, bool) {
	a, ok := v.byName[name]
	if !ok || a.Kind != llmflow.KindTeam {
		return nil, false
	}
	return a, true
}

// orgOf is the organisation of the key's team in this tree (a Slurm import
// may have moved or renamed it since the key was created); the key's own
// when the team is unknown.
func (v *accountView) orgOf(k *llmflow.Key) string {
	if t, ok := v.byName[k.Team]; ok && t.Kind == llmflow.KindTeam {
		return t.Parent
	}
	return k.Org
}

// disabled reports whether the key's team, organisation or project was
// disabled or removed from the tree, or its project moved out of its team:
// its key must stop working at once, so that no usage lands in an account
// the key does not belong to.
func (v *accountView) disabled(k *llmflow.Key) bool {
	t, ok := v.byName[k.Team]
	if !ok || t.Disabled || t.Kind != llmflow.KindTeam {
		return true
	}
	if o := v.byName[t.Parent]; o == nil || o.Disabled {
		return true
	}
	if k.Project != "" {
		if under, off := v.projectChain(k.Project, k.Team); !under || off {
			return true
		}
	}
	return false
}

// projectChain walks the parent chain of the project account named
// project up to team: under reports whether it reaches team (project a
// strict descendant of team), disabled whether an account on the way (project
// included, team excluded) is disabled.
func (v *accountView) projectChain(project, team string) (under, disabled bool) {
	a, ok := v.byName[project]
	if !ok || a.Kind != llmflow.KindProject {
		return false, false
	}
	// A well-formed tree has no cycle; the bound guards against one anyway.
	for range len(v.accts) {
		disabled = disabled || a.Disabled
		if a.Parent == team {
			return true, disabled
		}
		if a, ok = v.byName[a.Parent]; !ok {
			return false, disabled
		}
	}
	return false, disabled
}

// tree is the fair-share tree of the enabled accounts as Slurm's Fair
// Tree sees it: organisations, their teams, their projects at any depth,
// and under each account first its user associations (leaves, like
// sshare's user rows), then its sub-accounts; root's own user associations
// (a KindRoot account) are children of the root, before the organisations.
func (v *accountView) tree() *fairshare.Node {
	root := &fairshare.Node{}
	nodes := map[string]*fairshare.Node{"": root}
	for i := range v.accts {
		a := &v.accts[i]
		if a.Kind == llmflow.KindRoot {
			if !a.Disabled {
				root.Children = append(root.Children, userNodes(a.Users)...)
			}
			continue
		}
		parent, ok := nodes[a.Parent]
		if a.Disabled || !ok {
			continue // a disabled account takes its subtree out
		}
		n := &fairshare.Node{Name: a.Name, Shares: a.Shares, UseParent: a.UseParent, Children: userNodes(a.Users),
			GPULimit: a.Limits.GPUs, HasGPULimit: a.Limits.HasGPUs}
		parent.Children = append(parent.Children, n)
		nodes[a.Name] = n
	}
	return root
}

// userNodes are an account's user associations as fair-share leaves.
func userNodes(us []llmflow.UserAssoc) []*fairshare.Node {
	out := make([]*fairshare.Node, 0, len(us))
	for _, u := range us {
		// a user association's GrpTRES caps its user's requests in flight
		// in the account (a partition's: keys have no partition)
		out = append(out, &fairshare.Node{Name: u.User, User: true, Partition: u.Partition, Shares: u.Shares, UseParent: u.UseParent,
			GPULimit: u.Limits.GPUs, HasGPULimit: u.Limits.HasGPUs && u.Partition == ""})
	}
	return out
}

// CacheSalt is the cache_salt the gateway sends for an organisation's
// requests ("" for an unknown one). The salt is a secret-derived value;
// it is exported for tests and the demo, never shown to clients.
func (g *Gateway) CacheSalt(org string) string { return g.accts.Load().salts[org] }
