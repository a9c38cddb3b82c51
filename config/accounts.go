package config

import "github.com/go-llmflow/llmflow"

// Accounts is the organisation tree the configuration declares, the one
// conversion from configuration to tree: its organisations with their
// shares, then each organisation's teams. A team without a share splits
// equally what its siblings with one leave (nothing when they take it all;
// llmflow.Accounts.SplitRests, again with the teams of the admin API).
// Every account's Source is "config".
func (c *Config) Accounts() llmflow.Accounts {
	var out llmflow.Accounts
	for _, o := range c.Orgs {
		out = append(out, llmflow.Account{Name: o.Name, Kind: llmflow.KindOrg, Shares: o.Share, Source: "config"})
		for _, t := range o.Teams {
			out = append(out, llmflow.Account{Name: t.Name, Kind: llmflow.KindTeam, Parent: o.Name, Shares: t.Share,
				ShareRest: !t.HasShare, Source: "config"})
		}
	}
	out.SplitRests()
	return out
}
