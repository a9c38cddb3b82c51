package config

import "github.com/go-llmflow/llmflow"

// Accounts is the organisation tree the configuration declares, the one
// conversion from configuration to tree: its organisations with their
// shares, then each organisation's teams. A team without a share splits
// equally what its siblings with one leave (nothing when they take it all).
// Every account's Source is "config".
func (c *Config) Accounts() llmflow.Accounts {
	var out llmflow.Accounts
	for _, o := range c.Orgs {
		out = append(out, llmflow.Account{Name: o.Name, Kind: llmflow.KindOrg, Shares: o.Share, Source: "config"})
		given, without := 0.0, 0
		for _, t := range o.Teams {
			if t.HasShare {
				given += t.Share
			} else {
				without++
			}
		}
		rest := 0.0
		if without > 0 && given < 1 {
			rest = (1 - given) / float64(without)
		}
		for _, t := range o.Teams {
			share := rest
			if t.HasShare {
				share = t.Share
			}
			out = append(out, llmflow.Account{Name: t.Name, Kind: llmflow.KindTeam, Parent: o.Name, Shares: share, Source: "config"})
		}
	}
	return out
}
