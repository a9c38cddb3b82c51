package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/config"
)

// newAdminClient returns the admin API client of the gateway at base
// (http(s), no credentials in the URL) that sends token: it never goes
// through an environment proxy and never follows a redirect (adminapi.New).
func newAdminClient(base, token string) (*adminapi.Client, error) {
	c, err := adminapi.New(base, token, nil)
	if err != nil {
		return nil, fmt.Errorf("--url %w", err)
	}
	return c, nil
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
	client := func() (*adminapi.Client, error) {
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
	run := func(f func(ctx context.Context, c *adminapi.Client, args []string) error) func(*cobra.Command, []string) error {
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

type runner = func(func(ctx context.Context, c *adminapi.Client, args []string) error) func(*cobra.Command, []string) error

func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short}
	c.AddCommand(subs...)
	return c
}

func adminWhoami(e *env, run runner) *cobra.Command {
	var f listFormat
	cmd := &cobra.Command{Use: "whoami", Short: "Who the token is and their roles", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			me, err := c.Whoami(ctx)
			if err != nil {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			users, err := c.Users(ctx)
			if err != nil {
				return err
			}
			t := &table{cols: []string{"User", "Org", "Created", "Disabled", "Roles"}, widths: []int{10, 10, 19, 19, 30}}
			for _, u := range users {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.CreateUser(ctx, adminapi.UserRequest{Name: args[0], Org: org}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "user %s created\n", args[0])
			return nil
		})}
	add.Flags().StringVar(&org, "org", "", "the organisation the user belongs to")
	disable := &cobra.Command{Use: "disable NAME", Short: "Disable a user and revoke their tokens (proxy admins)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.DisableUser(ctx, args[0]); err != nil {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			tokens, err := c.Tokens(ctx, args[0])
			if err != nil {
				return err
			}
			t := &table{cols: []string{"ID", "Hint", "Created", "Revoked", "Name"}, widths: []int{20, 10, 19, 19, 20}}
			for _, k := range tokens {
				t.add(k.ID, k.Hint, timeCell(&k.CreatedAt), timeCell(k.RevokedAt), k.Name)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	var name string
	add := &cobra.Command{Use: "add USER", Short: "Create an admin token; the secret is printed once, on stdout alone", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			tok, err := c.CreateToken(ctx, args[0], adminapi.TokenRequest{Name: name})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "token %s created for %s; it is shown once:\n", tok.ID, args[0])
			fmt.Fprintln(e.stdout, tok.Token)
			return nil
		})}
	add.Flags().StringVar(&name, "name", "", "what the token is for")
	revoke := &cobra.Command{Use: "revoke USER ID", Short: "Revoke an admin token", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.RevokeToken(ctx, args[0], args[1]); err != nil {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			roles, err := c.Roles(ctx, args[0])
			if err != nil {
				return err
			}
			t := &table{cols: []string{"User", "Role", "Org", "Team", "Source"}, widths: []int{10, 12, 10, 10, 6}}
			for _, r := range roles {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.GrantRole(ctx, args[0], adminapi.RoleRequest{Role: args[1], Org: org, Team: team}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s granted %s\n", args[0], adminapi.Grant{Role: args[1], Org: org, Team: team})
			return nil
		})}
	scopeFlags(grant)
	revoke := &cobra.Command{Use: "revoke USER ROLE", Short: "Remove a role", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.RevokeRole(ctx, args[0], adminapi.RoleRequest{Role: args[1], Org: org, Team: team}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s no longer holds %s\n", args[0], adminapi.Grant{Role: args[1], Org: org, Team: team})
			return nil
		})}
	scopeFlags(revoke)
	return group("roles", "Roles of a user; nobody grants above their own scope", list, grant, revoke)
}

// listAccounts prints accounts (the answer of list, unless err) in
// columns cols of width 10, one row of each.
func listAccounts(e *env, accounts []adminapi.Account, err error, f listFormat, cols []string, row func(a adminapi.Account) []string) error {
	if err != nil {
		return err
	}
	t := &table{cols: cols, widths: make([]int, len(cols))}
	for i := range t.widths {
		t.widths[i] = 10
	}
	for _, a := range accounts {
		t.add(row(a)...)
	}
	t.write(e.stdout, f)
	return nil
}

func share(v float64) string { return fmt.Sprintf("%g", v) }

func adminOrgs(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list", Short: "List the organisations you hold a role in", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			orgs, err := c.Orgs(ctx)
			return listAccounts(e, orgs, err, f, []string{"Org", "Share", "Disabled", "Source"}, func(a adminapi.Account) []string {
				return []string{a.Name, share(a.Share), yesNo(a.Disabled), a.Source}
			})
		})}
	f.flags(list)
	var orgShare float64
	add := &cobra.Command{Use: "add NAME [--share N]", Short: "Create an organisation (without --share it only borrows)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.CreateOrg(ctx, adminapi.OrgRequest{Name: args[0], Share: &orgShare}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "organisation %s created\n", args[0])
			return nil
		})}
	disable := &cobra.Command{Use: "disable NAME", Short: "Disable an organisation, its teams, projects and keys", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return disableAccount(e, c, ctx, adminapi.Org(args[0]), "organisation "+args[0])
		})}
	enable := &cobra.Command{Use: "enable NAME", Short: "Enable an organisation an admin disabled (its revoked keys stay revoked)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return enableAccount(e, c, ctx, adminapi.Org(args[0]), "organisation "+args[0])
		})}
	add.Flags().Float64Var(&orgShare, "share", 0, "its share of the pools among the organisations (0: none, it only borrows)")
	shareCmd := &cobra.Command{Use: "share NAME N", Short: "Set the share of an organisation created here", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return setAccountShare(e, c, ctx, adminapi.Org(args[0]), "organisation "+args[0], args[1])
		})}
	return group("orgs", "Organisations (institutions)", list, add, disable, enable, shareCmd)
}

func disableAccount(e *env, c *adminapi.Client, ctx context.Context, a adminapi.AccountRef, what string) error {
	out, err := c.DisableAccount(ctx, a)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s disabled, %d keys revoked\n", what, out.KeysRevoked)
	return nil
}

// setAccountShare is the share subcommand of orgs, teams and projects.
func setAccountShare(e *env, c *adminapi.Client, ctx context.Context, a adminapi.AccountRef, what, value string) error {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return fmt.Errorf("share %q is not a number", value)
	}
	if _, err := c.SetShare(ctx, a, v); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: share %s\n", what, strconv.FormatFloat(v, 'g', -1, 64))
	return nil
}

// enableAccount is the enable subcommand of orgs, teams and projects.
func enableAccount(e *env, c *adminapi.Client, ctx context.Context, a adminapi.AccountRef, what string) error {
	if _, err := c.EnableAccount(ctx, a); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s enabled (keys revoked when it was disabled stay revoked: create new ones)\n", what)
	return nil
}

func adminTeams(e *env, run runner) *cobra.Command {
	var f listFormat
	var org string
	list := &cobra.Command{Use: "list", Short: "List the teams you may see", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			teams, err := c.Teams(ctx, org)
			return listAccounts(e, teams, err, f, []string{"Team", "Org", "Share", "Disabled", "Source"}, func(a adminapi.Account) []string {
				return []string{a.Name, a.Org, share(a.Share), yesNo(a.Disabled), a.Source}
			})
		})}
	f.flags(list)
	list.Flags().StringVar(&org, "org", "", "only this organisation's teams")
	var addOrg string
	var teamShare float64
	add := &cobra.Command{Use: "add NAME --org ORG [--share N]", Short: "Create a team of an organisation", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.CreateTeam(ctx, adminapi.TeamRequest{Name: args[0], Org: addOrg, Share: &teamShare}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "team %s created in %s\n", args[0], addOrg)
			return nil
		})}
	add.Flags().StringVar(&addOrg, "org", "", "the team's organisation")
	add.Flags().Float64Var(&teamShare, "share", 0, "its share among the organisation's teams (0: none, it only borrows)")
	disable := &cobra.Command{Use: "disable NAME", Short: "Disable a team, its projects and keys", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return disableAccount(e, c, ctx, adminapi.Team(args[0]), "team "+args[0])
		})}
	enable := &cobra.Command{Use: "enable NAME", Short: "Enable a team an admin disabled (its revoked keys stay revoked)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return enableAccount(e, c, ctx, adminapi.Team(args[0]), "team "+args[0])
		})}
	shareCmd := &cobra.Command{Use: "share NAME N", Short: "Set the share of a team created here", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return setAccountShare(e, c, ctx, adminapi.Team(args[0]), "team "+args[0], args[1])
		})}
	return group("teams", "Teams (labs) of organisations", list, add, disable, enable, shareCmd)
}

func adminProjects(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list TEAM", Short: "List a team's projects", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			projects, err := c.Projects(ctx, args[0])
			return listAccounts(e, projects, err, f,
				[]string{"Project", "Team", "Parent", "Disabled", "Source"}, func(a adminapi.Account) []string {
					return []string{a.Name, a.Team, a.Parent, yesNo(a.Disabled), a.Source}
				})
		})}
	f.flags(list)
	var projShare float64
	add := &cobra.Command{Use: "add TEAM NAME [--share N]", Short: "Create a project of a team", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.CreateProject(ctx, args[0], adminapi.ProjectRequest{Name: args[1], Share: &projShare}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "project %s created in %s\n", args[1], args[0])
			return nil
		})}
	disable := &cobra.Command{Use: "disable TEAM NAME", Short: "Disable a project and revoke its keys", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return disableAccount(e, c, ctx, adminapi.Project(args[0], args[1]), "project "+args[1])
		})}
	enable := &cobra.Command{Use: "enable TEAM NAME", Short: "Enable a project an admin disabled (its revoked keys stay revoked)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return enableAccount(e, c, ctx, adminapi.Project(args[0], args[1]), "project "+args[1])
		})}
	add.Flags().Float64Var(&projShare, "share", 0, "its share among the team's projects (0: none, it only borrows)")
	shareCmd := &cobra.Command{Use: "share TEAM NAME N", Short: "Set the share of a project created here", Args: cobra.ExactArgs(3),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			return setAccountShare(e, c, ctx, adminapi.Project(args[0], args[1]), "project "+args[1], args[2])
		})}
	return group("projects", "Projects of a team", list, add, disable, enable, shareCmd)
}

func adminModels(e *env, run runner) *cobra.Command {
	var f listFormat
	show := &cobra.Command{Use: "show TEAM", Short: "The models a team may use (none listed: every model)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			out, err := c.TeamModels(ctx, args[0])
			if err != nil {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			models := append([]string{}, args[1:]...)
			if _, err := c.SetTeamModels(ctx, args[0], models); err != nil {
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
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			keys, err := c.Keys(ctx, adminapi.KeyQuery{Org: org, Team: team, IncludeRevoked: all})
			if err != nil {
				return err
			}
			t := &table{cols: []string{"ID", "Hint", "Org", "Team", "Project", "Owner", "Revoked", "Name"}, widths: []int{20, 10, 10, 10, 10, 10, 19, 20}}
			for _, k := range keys {
				t.add(k.ID, k.Hint, k.Org, k.Team, k.Project, k.Owner, timeCell(k.RevokedAt), k.Name)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	list.Flags().StringVar(&team, "team", "", "only this team's keys")
	list.Flags().StringVar(&org, "org", "", "only this organisation's keys")
	list.Flags().BoolVar(&all, "all", false, "revoked keys too")
	var req adminapi.KeyRequest
	var expires time.Duration
	add := &cobra.Command{Use: "add --team TEAM [--project P] [--name N] [--owner USER] [--expires 720h] [--model M]",
		Short: "Create a client key; the secret is printed once, on stdout alone", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			if expires < 0 {
				return fmt.Errorf("--expires %s: want a duration from now, such as 720h", expires)
			}
			if expires > 0 {
				at := time.Now().Add(expires).UTC().Truncate(time.Second)
				req.ExpiresAt = &at
			}
			k, err := c.CreateKey(ctx, req)
			if err != nil {
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
	limitFlags(add, &req.RPM, &req.TPM, &req.MaxInFlight)
	add.Flags().StringSliceVar(&req.Tags, "tag", nil, "a tag its spend is reported under (repeat or separate with ',')")
	add.Flags().DurationVar(&expires, "expires", 0, "the key stops working this long from now (0: never)")
	add.Flags().StringSliceVar(&req.Models, "model", nil, "a model the key may use, and only those (repeat or separate with ','; none: every model of its team)")
	show := &cobra.Command{Use: "show ID", Short: "One client key (never its secret)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			k, err := c.Key(ctx, args[0])
			if err != nil {
				return err
			}
			b, err := json.MarshalIndent(k, "", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, string(b))
			return nil
		})}
	var grace string
	rotate := &cobra.Command{Use: "rotate ID [--grace 24h]", Short: "Give a client key a new secret, printed once on stdout; the old one works for --grace more",
		Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			k, err := c.RotateKey(ctx, args[0], adminapi.RotateRequest{Grace: grace})
			if err != nil {
				return err
			}
			until := "now"
			if k.PreviousValidUntil != nil {
				until = k.PreviousValidUntil.Format(time.RFC3339)
			}
			fmt.Fprintf(e.stderr, "key %s rotated; the previous secret works until %s; the new one is shown once:\n", k.ID, until)
			fmt.Fprintln(e.stdout, k.Key)
			return nil
		})}
	rotate.Flags().StringVar(&grace, "grace", "", "how long the previous secret keeps working (0s to 720h; default 1h)")
	revoke := &cobra.Command{Use: "revoke ID", Short: "Revoke a client key", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.RevokeKey(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "key %s revoked\n", args[0])
			return nil
		})}
	var lim adminapi.Limits
	limits := &cobra.Command{Use: "limits ID [--rpm N] [--tpm N] [--max-inflight N]",
		Short: "Set a key's limits, all three (one not given is 0: unlimited; team admins and above)", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			k, err := c.SetKeyLimits(ctx, args[0], lim)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "key %s: rpm %d, tpm %d, max_inflight %d\n", k.ID, k.RPM, k.TPM, k.MaxInFlight)
			return nil
		})}
	limitFlags(limits, &lim.RPM, &lim.TPM, &lim.MaxInFlight)
	active := func(on bool, verb string) func(ctx context.Context, c *adminapi.Client, args []string) error {
		return func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.SetKeyActive(ctx, args[0], on); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "key %s %s\n", args[0], verb)
			return nil
		}
	}
	disable := &cobra.Command{Use: "disable ID", Short: "Deactivate a client key at once (enable undoes it; revoke is final)", Args: cobra.ExactArgs(1),
		RunE: run(active(false, "disabled"))}
	enable := &cobra.Command{Use: "enable ID", Short: "Reactivate a client key that was disabled (not a revoked one)", Args: cobra.ExactArgs(1),
		RunE: run(active(true, "enabled"))}
	return group("keys", "Client keys (llmf-…)", list, add, show, rotate, revoke, limits, disable, enable)
}

// limitFlags are the flags of a key's limits (0: unlimited).
func limitFlags(cmd *cobra.Command, rpm, tpm, inflight *int) {
	cmd.Flags().IntVar(rpm, "rpm", 0, "requests per minute (0: unlimited)")
	cmd.Flags().IntVar(tpm, "tpm", 0, "tokens per minute (0: unlimited)")
	cmd.Flags().IntVar(inflight, "max-inflight", 0, "requests in flight (0: unlimited)")
}

func adminAudit(e *env, run runner) *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{Use: "audit", Short: "The admin writes you may see, newest first", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			q, err := o.query()
			if err != nil {
				return err
			}
			entries, err := c.Audit(ctx, q)
			if err != nil {
				return err
			}
			writeAudit(e.stdout, entries, o.format)
			return nil
		})}
	o.flags(cmd)
	return cmd
}
