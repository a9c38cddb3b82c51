package llmflow

import "time"

// RuntimeUpstream is an engine endpoint of a configured model registered
// through the admin API (smol-llm-proxy's runtime servers). It is kept in
// the store and comes back at every start; the configuration stays
// authoritative for what it declares: a runtime upstream can neither
// replace nor remove a configured one. It carries no secret: the gateway
// sends it no key, unless InheritKey, an admin's explicit (and audited)
// choice, has it send the model's key_file (whoever registers an engine
// they control would otherwise receive the key, and other organisations'
// prompts with it).
type RuntimeUpstream struct {
	Model   string
	Name    string
	BaseURL string // checked like the configuration's: http or https, no credentials, query or fragment
	// InheritKey sends the model's key_file to this upstream.
	InheritKey bool
	// KeyName, when set, is the upstream's own engine key: the file of that
	// name in the configuration's upstream_key_dir (never a path).
	KeyName   string
	CreatedAt time.Time
	UpdatedAt time.Time
	By        string // the admin who last wrote it
}

// ModelAlias is another client-facing name for a configured model: many
// aliases may name one model, and an alias can be switched to another
// model at runtime. The client sees the alias in every answer.
type ModelAlias struct {
	Name      string
	Model     string
	UpdatedAt time.Time
	By        string
}
