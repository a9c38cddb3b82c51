package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
)

// adminClient calls a running gateway's admin API with a token read from
// a file (an admin token llma-… or the master key).
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

// newAdminClient returns a client of the gateway at base (http(s), no
// credentials in the URL) that sends token. It never goes through an
// environment proxy and never follows a redirect: the token goes to the
// gateway named and nowhere else.
func newAdminClient(base, token string) (*adminClient, error) {
	base = strings.TrimRight(base, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("--url %q: want http(s)://host:port without credentials", base)
	}
	return &adminClient{base: base, token: token, http: &http.Client{
		Transport: &http.Transport{Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}, nil
}

// apiError is an admin API refusal: the status and the gateway's message.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

// do sends method path (with a JSON body when body is not nil) and decodes
// a JSON answer into out (when not nil).
func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("gateway url: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode >= 300 {
		var eb struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = strings.TrimSpace(string(b))
		}
		return &apiError{status: resp.StatusCode, msg: eb.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("admin API answer: %w", err)
	}
	return nil
}

// table is a listing printed like sacctmgr: right-aligned columns of
// fixed width (longer values cut, ending in '+'), a header and a dashed
// line; with -p / -P fields separated by '|' (-p with a trailing '|'),
// never cut; -n drops the header. Free-text columns come last, so a '|'
// inside one splits nothing a script reads with a field limit.
type table struct {
	cols   []string
	widths []int
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

type listFormat struct{ parsable, parsable2, noHeader bool }

func (f *listFormat) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&f.parsable2, "parsable2", "P", false, "fields separated by '|', no trailing '|'")
	cmd.Flags().BoolVarP(&f.parsable, "parsable", "p", false, "fields separated by '|', with a trailing '|'")
	cmd.Flags().BoolVarP(&f.noHeader, "noheader", "n", false, "no header line")
}

func (t *table) write(w io.Writer, f listFormat) {
	var b strings.Builder
	line := func(cells []string) {
		if f.parsable || f.parsable2 {
			b.WriteString(strings.Join(cells, "|"))
			if f.parsable {
				b.WriteString("|")
			}
			b.WriteString("\n")
			return
		}
		for i, c := range cells {
			wd := t.widths[i]
			if len([]rune(c)) > wd {
				c = string([]rune(c)[:wd-1]) + "+"
			}
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(strings.Repeat(" ", wd-len([]rune(c))) + c)
		}
		b.WriteString("\n")
	}
	if !f.noHeader {
		line(t.cols)
		if !f.parsable && !f.parsable2 {
			dash := make([]string, len(t.cols))
			for i, wd := range t.widths {
				dash[i] = strings.Repeat("-", wd)
			}
			b.WriteString(strings.Join(dash, " ") + "\n")
		}
	}
	for _, r := range t.rows {
		line(r)
	}
	io.WriteString(w, b.String())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func timeCell(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05")
}

func adminCmd(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "admin",
		Short: "Administer a running gateway through its admin API",
		Long: "admin calls a running gateway's admin API with the token in --token-file (a user's admin\n" +
			"token llma-…, or the master key). Listings print like sacctmgr: fixed-width columns, or with\n" +
			"-P (--parsable2) fields separated by '|' for scripts; -n drops the header. What you may see\n" +
			"and change is what your roles allow.",
	}
	pf := root.PersistentFlags()
	pf.String("url", "http://127.0.0.1:8080", "the gateway's base URL (LLMFLOW_ADMIN_URL)")
	pf.String("token-file", "", "file holding your admin token or the master key (LLMFLOW_ADMIN_TOKEN_FILE)")
	for _, name := range []string{"url", "token-file"} {
		if err := e.v.BindPFlag("admin."+name, pf.Lookup(name)); err != nil {
			panic(err)
		}
		if err := e.v.BindEnv("admin."+name, "LLMFLOW_ADMIN_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); err != nil {
			panic(err)
		}
	}
	client := func() (*adminClient, error) {
		path := e.v.GetString("admin.token-file")
		if path == "" {
			return nil, fmt.Errorf("need a token: pass --token-file FILE (or set LLMFLOW_ADMIN_TOKEN_FILE)")
		}
		tok, err := config.ReadSecret(path)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		// an admin token is a secret like those the configuration names:
		// refused when group or others may read it
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && os.Getenv(config.AllowInsecureSecretFilesEnv) != "1" {
			return nil, fmt.Errorf("token file %s: mode %04o gives access to group or others; chmod 600 it", path, fi.Mode().Perm())
		}
		return newAdminClient(e.v.GetString("admin.url"), tok)
	}
	// run wraps a subcommand body with its client.
	run := func(f func(ctx context.Context, c *adminClient, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			return f(cmd.Context(), c, args)
		}
	}
	root.AddCommand(
		adminWhoami(e, run), adminUsers(e, run), adminTokens(e, run), adminRoles(e, run),
		adminOrgs(e, run), adminTeams(e, run), adminProjects(e, run), adminModels(e, run),
		adminKeys(e, run), adminAudit(e, run),
		adminUpstreams(e, run), adminAliases(e, run), // admin_upstreams.go
		adminBudgets(e, run), // budgets.go
	)
	return root
}

type runner = func(func(ctx context.Context, c *adminClient, args []string) error) func(*cobra.Command, []string) error

func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short}
	c.AddCommand(subs...)
	return c
}

type roleJSON struct {
	Role   string `json:"role"`
	Org    string `json:"org,omitempty"`
	Team   string `json:"team,omitempty"`
	Source string `json:"source,omitempty"` // "slurm", or "" for a role granted by hand (listings only)
}

func (r roleJSON) String() string {
	switch {
	case r.Team != "":
		return r.Role + "@" + r.Team
	case r.Org != "":
		return r.Role + "@" + r.Org
	}
	return r.Role
}

func adminWhoami(e *env, run runner) *cobra.Command {
	var f listFormat
	cmd := &cobra.Command{Use: "whoami", Short: "Who the token is and their roles", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			var me struct {
				Name  string     `json:"name"`
				Kind  string     `json:"kind"`
				Roles []roleJSON `json:"roles"`
			}
			if err := c.do(ctx, "GET", "/admin/whoami", nil, &me); err != nil {
				return err
			}
			t := &table{cols: []string{"User", "Kind", "Role", "Org", "Team"}, widths: []int{10, 10, 12, 10, 10}}
			for _, r := range me.Roles {
				t.add(me.Name, me.Kind, r.Role, r.Org, r.Team)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(cmd)
	return cmd
}

func adminUsers(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list", Short: "List the users you may see", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			var out struct {
				Data []struct {
					Name       string     `json:"name"`
					Org        string     `json:"org"`
					CreatedAt  time.Time  `json:"created_at"`
					DisabledAt *time.Time `json:"disabled_at"`
					Roles      []roleJSON `json:"roles"`
				} `json:"data"`
			}
			if err := c.do(ctx, "GET", "/admin/users", nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"User", "Org", "Created", "Disabled", "Roles"}, widths: []int{10, 10, 19, 19, 30}}
			for _, u := range out.Data {
				var rs []string
				for _, r := range u.Roles {
					rs = append(rs, r.String())
				}
				t.add(u.Name, u.Org, timeCell(&u.CreatedAt), timeCell(u.DisabledAt), strings.Join(rs, ","))
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	var org string
	add := &cobra.Command{Use: "add NAME", Short: "Create a user (an org admin's users belong to their organisation)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "POST", "/admin/users", map[string]string{"name": args[0], "org": org}, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "user %s created\n", args[0])
			return nil
		})}
	add.Flags().StringVar(&org, "org", "", "the organisation the user belongs to")
	disable := &cobra.Command{Use: "disable NAME", Short: "Disable a user and revoke their tokens (proxy admins)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "DELETE", "/admin/users/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "user %s disabled, their tokens revoked\n", args[0])
			return nil
		})}
	return group("users", "Users of the admin API", list, add, disable)
}

func adminTokens(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list USER", Short: "List a user's admin tokens (never the secrets)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			var out struct {
				Data []struct {
					ID        string     `json:"id"`
					Hint      string     `json:"hint"`
					Name      string     `json:"name"`
					CreatedAt time.Time  `json:"created_at"`
					RevokedAt *time.Time `json:"revoked_at"`
				} `json:"data"`
			}
			if err := c.do(ctx, "GET", "/admin/users/"+url.PathEscape(args[0])+"/tokens", nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"ID", "Hint", "Created", "Revoked", "Name"}, widths: []int{20, 10, 19, 19, 20}}
			for _, k := range out.Data {
				t.add(k.ID, k.Hint, timeCell(&k.CreatedAt), timeCell(k.RevokedAt), k.Name)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	var name string
	add := &cobra.Command{Use: "add USER", Short: "Create an admin token; the secret is printed once, on stdout alone", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			var tok struct {
				ID    string `json:"id"`
				Token string `json:"token"`
			}
			if err := c.do(ctx, "POST", "/admin/users/"+url.PathEscape(args[0])+"/tokens", map[string]string{"name": name}, &tok); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "token %s created for %s; it is shown once:\n", tok.ID, args[0])
			fmt.Fprintln(e.stdout, tok.Token)
			return nil
		})}
	add.Flags().StringVar(&name, "name", "", "what the token is for")
	revoke := &cobra.Command{Use: "revoke USER ID", Short: "Revoke an admin token", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "DELETE", "/admin/users/"+url.PathEscape(args[0])+"/tokens/"+url.PathEscape(args[1]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "token %s revoked\n", args[1])
			return nil
		})}
	return group("tokens", "Admin tokens of a user (the user themselves or a proxy admin)", list, add, revoke)
}

func adminRoles(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list USER", Short: "List a user's roles you may see", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			var out struct{ Data []roleJSON }
			if err := c.do(ctx, "GET", "/admin/users/"+url.PathEscape(args[0])+"/roles", nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"User", "Role", "Org", "Team", "Source"}, widths: []int{10, 12, 10, 10, 6}}
			for _, r := range out.Data {
				src := r.Source
				if src == "" {
					src = "admin" // granted by hand through the admin API
				}
				t.add(args[0], r.Role, r.Org, r.Team, src)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	var org, team string
	scopeFlags := func(cmd *cobra.Command) {
		cmd.Flags().StringVar(&org, "org", "", "the organisation (org_admin, viewer)")
		cmd.Flags().StringVar(&team, "team", "", "the team (team_admin, member, viewer)")
	}
	grant := &cobra.Command{Use: "grant USER ROLE", Short: "Grant a role (proxy_admin, proxy_viewer, org_admin, team_admin, member, viewer)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			r := roleJSON{Role: args[1], Org: org, Team: team}
			if err := c.do(ctx, "PUT", "/admin/users/"+url.PathEscape(args[0])+"/roles", r, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s granted %s\n", args[0], r)
			return nil
		})}
	scopeFlags(grant)
	revoke := &cobra.Command{Use: "revoke USER ROLE", Short: "Remove a role", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			q := url.Values{"role": {args[1]}}
			if org != "" {
				q.Set("org", org)
			}
			if team != "" {
				q.Set("team", team)
			}
			if err := c.do(ctx, "DELETE", "/admin/users/"+url.PathEscape(args[0])+"/roles?"+q.Encode(), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s no longer holds %s\n", args[0], roleJSON{Role: args[1], Org: org, Team: team})
			return nil
		})}
	scopeFlags(revoke)
	return group("roles", "Roles of a user; nobody grants above their own scope", list, grant, revoke)
}

type accountJSON struct {
	Name     string  `json:"name"`
	Org      string  `json:"org"`
	Team     string  `json:"team"`
	Parent   string  `json:"parent"`
	Share    float64 `json:"share"`
	Disabled bool    `json:"disabled"`
	Source   string  `json:"source"`
}

func listAccounts(e *env, c *adminClient, ctx context.Context, path string, f listFormat, cols []string, row func(a accountJSON) []string) error {
	var out struct{ Data []accountJSON }
	if err := c.do(ctx, "GET", path, nil, &out); err != nil {
		return err
	}
	t := &table{cols: cols, widths: make([]int, len(cols))}
	for i := range t.widths {
		t.widths[i] = 10
	}
	for _, a := range out.Data {
		t.add(row(a)...)
	}
	t.write(e.stdout, f)
	return nil
}

func share(v float64) string { return fmt.Sprintf("%g", v) }

func adminOrgs(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list", Short: "List the organisations you hold a role in", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			return listAccounts(e, c, ctx, "/admin/orgs", f, []string{"Org", "Share", "Disabled", "Source"}, func(a accountJSON) []string {
				return []string{a.Name, share(a.Share), yesNo(a.Disabled), a.Source}
			})
		})}
	f.flags(list)
	var orgShare float64
	add := &cobra.Command{Use: "add NAME [--share N]", Short: "Create an organisation (without --share it only borrows)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "POST", "/admin/orgs", map[string]any{"name": args[0], "share": orgShare}, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "organisation %s created\n", args[0])
			return nil
		})}
	disable := &cobra.Command{Use: "disable NAME", Short: "Disable an organisation, its teams, projects and keys", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return disableAccount(e, c, ctx, "/admin/orgs/"+url.PathEscape(args[0]), "organisation "+args[0])
		})}
	enable := &cobra.Command{Use: "enable NAME", Short: "Enable an organisation an admin disabled (its revoked keys stay revoked)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return enableAccount(e, c, ctx, "/admin/orgs/"+url.PathEscape(args[0]), "organisation "+args[0])
		})}
	add.Flags().Float64Var(&orgShare, "share", 0, "its share of the pools among the organisations (0: none, it only borrows)")
	shareCmd := &cobra.Command{Use: "share NAME N", Short: "Set the share of an organisation created here", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return setAccountShare(e, c, ctx, "/admin/orgs/"+url.PathEscape(args[0]), "organisation "+args[0], args[1])
		})}
	return group("orgs", "Organisations (institutions)", list, add, disable, enable, shareCmd)
}

func disableAccount(e *env, c *adminClient, ctx context.Context, path, what string) error {
	var out struct {
		Revoked int `json:"keys_revoked"`
	}
	if err := c.do(ctx, "DELETE", path, nil, &out); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s disabled, %d keys revoked\n", what, out.Revoked)
	return nil
}

// setAccountShare is the share subcommand of orgs, teams and projects
// (path is the account's, without /share).
func setAccountShare(e *env, c *adminClient, ctx context.Context, path, what, value string) error {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return fmt.Errorf("share %q is not a number", value)
	}
	if err := c.do(ctx, "PUT", path+"/share", map[string]float64{"share": v}, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: share %s\n", what, strconv.FormatFloat(v, 'g', -1, 64))
	return nil
}

// enableAccount is the enable subcommand of orgs, teams and projects (path
// is the account's, without /enable).
func enableAccount(e *env, c *adminClient, ctx context.Context, path, what string) error {
	if err := c.do(ctx, "POST", path+"/enable", nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s enabled (keys revoked when it was disabled stay revoked: create new ones)\n", what)
	return nil
}

func adminTeams(e *env, run runner) *cobra.Command {
	var f listFormat
	var org string
	list := &cobra.Command{Use: "list", Short: "List the teams you may see", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			path := "/admin/teams"
			if org != "" {
				path += "?org=" + url.QueryEscape(org)
			}
			return listAccounts(e, c, ctx, path, f, []string{"Team", "Org", "Share", "Disabled", "Source"}, func(a accountJSON) []string {
				return []string{a.Name, a.Org, share(a.Share), yesNo(a.Disabled), a.Source}
			})
		})}
	f.flags(list)
	list.Flags().StringVar(&org, "org", "", "only this organisation's teams")
	var addOrg string
	var teamShare float64
	add := &cobra.Command{Use: "add NAME --org ORG [--share N]", Short: "Create a team of an organisation", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "POST", "/admin/teams", map[string]any{"name": args[0], "org": addOrg, "share": teamShare}, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "team %s created in %s\n", args[0], addOrg)
			return nil
		})}
	add.Flags().StringVar(&addOrg, "org", "", "the team's organisation")
	add.Flags().Float64Var(&teamShare, "share", 0, "its share among the organisation's teams (0: none, it only borrows)")
	disable := &cobra.Command{Use: "disable NAME", Short: "Disable a team, its projects and keys", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return disableAccount(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0]), "team "+args[0])
		})}
	enable := &cobra.Command{Use: "enable NAME", Short: "Enable a team an admin disabled (its revoked keys stay revoked)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return enableAccount(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0]), "team "+args[0])
		})}
	shareCmd := &cobra.Command{Use: "share NAME N", Short: "Set the share of a team created here", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return setAccountShare(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0]), "team "+args[0], args[1])
		})}
	return group("teams", "Teams (labs) of organisations", list, add, disable, enable, shareCmd)
}

func adminProjects(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list TEAM", Short: "List a team's projects", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return listAccounts(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0])+"/projects", f,
				[]string{"Project", "Team", "Parent", "Disabled", "Source"}, func(a accountJSON) []string {
					return []string{a.Name, a.Team, a.Parent, yesNo(a.Disabled), a.Source}
				})
		})}
	f.flags(list)
	var projShare float64
	add := &cobra.Command{Use: "add TEAM NAME [--share N]", Short: "Create a project of a team", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "POST", "/admin/teams/"+url.PathEscape(args[0])+"/projects", map[string]any{"name": args[1], "share": projShare}, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "project %s created in %s\n", args[1], args[0])
			return nil
		})}
	disable := &cobra.Command{Use: "disable TEAM NAME", Short: "Disable a project and revoke its keys", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return disableAccount(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0])+"/projects/"+url.PathEscape(args[1]), "project "+args[1])
		})}
	enable := &cobra.Command{Use: "enable TEAM NAME", Short: "Enable a project an admin disabled (its revoked keys stay revoked)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return enableAccount(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0])+"/projects/"+url.PathEscape(args[1]), "project "+args[1])
		})}
	add.Flags().Float64Var(&projShare, "share", 0, "its share among the team's projects (0: none, it only borrows)")
	shareCmd := &cobra.Command{Use: "share TEAM NAME N", Short: "Set the share of a project created here", Args: cobra.ExactArgs(3),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			return setAccountShare(e, c, ctx, "/admin/teams/"+url.PathEscape(args[0])+"/projects/"+url.PathEscape(args[1]), "project "+args[1], args[2])
		})}
	return group("projects", "Projects of a team", list, add, disable, enable, shareCmd)
}

func adminModels(e *env, run runner) *cobra.Command {
	var f listFormat
	show := &cobra.Command{Use: "show TEAM", Short: "The models a team may use (none listed: every model)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			var out struct {
				Models []string `json:"models"`
			}
			if err := c.do(ctx, "GET", "/admin/teams/"+url.PathEscape(args[0])+"/models", nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"Team", "Model"}, widths: []int{10, 30}}
			for _, m := range out.Models {
				t.add(args[0], m)
			}
			if len(out.Models) == 0 {
				t.add(args[0], "(all)")
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(show)
	set := &cobra.Command{Use: "set TEAM [MODEL…]", Short: "Set the models a team may use (no model: every model)", Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			models := append([]string{}, args[1:]...)
			if err := c.do(ctx, "PUT", "/admin/teams/"+url.PathEscape(args[0])+"/models", map[string][]string{"models": models}, nil); err != nil {
				return err
			}
			if len(models) == 0 {
				fmt.Fprintf(e.stdout, "team %s may use every model\n", args[0])
			} else {
				fmt.Fprintf(e.stdout, "team %s may use %s\n", args[0], strings.Join(models, ", "))
			}
			return nil
		})}
	return group("models", "Team model lists", show, set)
}

func adminKeys(e *env, run runner) *cobra.Command {
	var f listFormat
	var team, org string
	var all bool
	list := &cobra.Command{Use: "list", Short: "List the keys you may see (never the secrets)", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			q := url.Values{}
			if team != "" {
				q.Set("team", team)
			}
			if org != "" {
				q.Set("org", org)
			}
			if all {
				q.Set("include_revoked", "true")
			}
			var out struct {
				Data []struct {
					ID        string     `json:"id"`
					Hint      string     `json:"hint"`
					Name      string     `json:"name"`
					Org       string     `json:"org"`
					Team      string     `json:"team"`
					Project   string     `json:"project"`
					Owner     string     `json:"owner"`
					RevokedAt *time.Time `json:"revoked_at"`
				} `json:"data"`
			}
			if err := c.do(ctx, "GET", "/admin/keys?"+q.Encode(), nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"ID", "Hint", "Org", "Team", "Project", "Owner", "Revoked", "Name"}, widths: []int{20, 10, 10, 10, 10, 10, 19, 20}}
			for _, k := range out.Data {
				t.add(k.ID, k.Hint, k.Org, k.Team, k.Project, k.Owner, timeCell(k.RevokedAt), k.Name)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	list.Flags().StringVar(&team, "team", "", "only this team's keys")
	list.Flags().StringVar(&org, "org", "", "only this organisation's keys")
	list.Flags().BoolVar(&all, "all", false, "revoked keys too")
	var req struct {
		Team    string `json:"team"`
		Project string `json:"project,omitempty"`
		Name    string `json:"name"`
		Owner   string `json:"owner,omitempty"`
	}
	add := &cobra.Command{Use: "add --team TEAM [--project P] [--name N] [--owner USER]", Short: "Create a client key; the secret is printed once, on stdout alone", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			var k struct {
				ID  string `json:"id"`
				Key string `json:"key"`
			}
			if err := c.do(ctx, "POST", "/admin/keys", req, &k); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "key %s created; it is shown once:\n", k.ID)
			fmt.Fprintln(e.stdout, k.Key)
			return nil
		})}
	add.Flags().StringVar(&req.Team, "team", "", "the key's team")
	add.Flags().StringVar(&req.Project, "project", "", "a project under the team")
	add.Flags().StringVar(&req.Name, "name", "", "what the key is for")
	add.Flags().StringVar(&req.Owner, "owner", "", "the Slurm user its usage counts under (a member's keys are their own)")
	revoke := &cobra.Command{Use: "revoke ID", Short: "Revoke a client key", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "DELETE", "/admin/keys/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "key %s revoked\n", args[0])
			return nil
		})}
	return group("keys", "Client keys (llmf-…)", list, add, revoke)
}

func adminAudit(e *env, run runner) *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{Use: "audit", Short: "The admin writes you may see, newest first", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			q := url.Values{"limit": {fmt.Sprint(o.limit)}}
			for k, v := range map[string]string{"from": o.from, "to": o.to, "actor": o.actor} {
				if v != "" {
					q.Set(k, v)
				}
			}
			var out struct{ Data []auditRow }
			if err := c.do(ctx, "GET", "/admin/audit?"+q.Encode(), nil, &out); err != nil {
				return err
			}
			writeAudit(e.stdout, out.Data, o.format)
			return nil
		})}
	o.flags(cmd)
	return cmd
}
