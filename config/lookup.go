package config

// Pool returns the pool named name.
func (c *Config) Pool(name string) (*Pool, bool) {
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			return &c.Pools[i], true
		}
	}
	return nil, false
}

// Org returns the organisation named name.
func (c *Config) Org(name string) (*Org, bool) {
	for i := range c.Orgs {
		if c.Orgs[i].Name == name {
			return &c.Orgs[i], true
		}
	}
	return nil, false
}

// Team returns the team named name, whatever its organisation (team names
// are global).
func (c *Config) Team(name string) (*Team, bool) {
	for i := range c.Orgs {
		for j := range c.Orgs[i].Teams {
			if c.Orgs[i].Teams[j].Name == name {
				return &c.Orgs[i].Teams[j], true
			}
		}
	}
	return nil, false
}

// Model returns the model named name (the client-facing name).
func (c *Config) Model(name string) (*Model, bool) {
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i], true
		}
	}
	return nil, false
}
