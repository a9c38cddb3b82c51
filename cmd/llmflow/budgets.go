package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/store"
)

// Both stores keep budgets (serve wires them into the gateway).
var (
	_ gateway.BudgetStore = (*store.SQLite)(nil)
	_ gateway.BudgetStore = (*store.Postgres)(nil)
	_ admin.KeyLimitStore = (*store.SQLite)(nil)
	_ admin.KeyLimitStore = (*store.Postgres)(nil)
)

// budgetsCmd is `llmflow budgets`: the admin API's budgets from the
// command line, against a running gateway. The master key is read from a
// file (--admin-key-file, else the configuration's master_key_file),
// never from a flag or the environment.
func budgetsCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budgets",
		Short: "List and set GPU-hour budgets on a running gateway",
		Long: "budgets talks to a running gateway's admin API (GET/PUT/DELETE /admin/budgets,\n" +
			"POST /admin/budgets/increase) with the master key read from --admin-key-file, or from the\n" +
			"master_key_file of the configuration given with -c. Amounts are GPU-hours per period\n" +
			"(day, week or month, UTC calendar).",
		Example: "  llmflow budgets list -c gateway.hcl\n" +
			"  llmflow budgets set -c gateway.hcl --kind team --name lab-nlp --period month --max-cost 500 --soft-limit 400\n" +
			"  llmflow budgets increase -c gateway.hcl --kind team --name lab-nlp --amount 50 --expires 2026-12-31T00:00:00Z\n" +
			"  llmflow budgets delete -c gateway.hcl --kind team --name lab-nlp",
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.String("url", "http://127.0.0.1:8080", "the gateway's base URL (LLMFLOW_ADMIN_URL, as llmflow admin)")
	pf.String("admin-key-file", "", "file holding the master key (default: the configuration's master_key_file)")
	for _, name := range []string{"url", "admin-key-file"} {
		if err := e.v.BindPFlag("budgets."+name, pf.Lookup(name)); err != nil {
			panic(err)
		}
	}
	if err := e.v.BindEnv("budgets.url", "LLMFLOW_ADMIN_URL"); err != nil {
		panic(err)
	}
	run := func(f func(ctx context.Context, c *adminapi.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := e.budgetsClient(cmd)
			if err != nil {
				return err
			}
			return f(cmd.Context(), c, args)
		}
	}
	cmd.AddCommand(budgetSubcommands(e, run)...)
	return cmd
}

// adminBudgets is `llmflow admin budgets`: the same subcommands as
// `llmflow budgets`, with admin's token (a delegated admin's own, within
// what the roles allow: org budgets by proxy admins, team budgets by org
// admins, project and key budgets by team admins).
func adminBudgets(e *env, run runner) *cobra.Command {
	return group("budgets", "List and set GPU-hour budgets (what your roles allow)", budgetSubcommands(e, run)...)
}

// budgetSubcommands are list, set, delete and increase, each run with the
// client run gives it.
func budgetSubcommands(e *env, run runner) []*cobra.Command {

	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the budgets in force with their spend, holds and effective limit",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			if asJSON {
				raw, err := c.BudgetsJSON(ctx, adminapi.BudgetScope{})
				if err != nil {
					return err
				}
				_, err = e.stdout.Write(raw)
				return err
			}
			bs, err := c.Budgets(ctx, adminapi.BudgetScope{})
			if err != nil {
				return err
			}
			return writeBudgetTable(e.stdout, bs)
		}),
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")

	var sc struct {
		kind, name, model, period, expires string
		maxCost, soft, amount              float64
	}
	scopeFlags := func(c *cobra.Command) {
		c.Flags().StringVar(&sc.kind, "kind", "", "org, team, project, key or tag")
		c.Flags().StringVar(&sc.name, "name", "", "the organisation, team, project, key ID or tag")
		c.Flags().StringVar(&sc.model, "model", "", "one model only (default: every model)")
		c.MarkFlagRequired("kind")
		c.MarkFlagRequired("name")
	}
	set := &cobra.Command{
		Use:   "set",
		Short: "Set (create or replace) the budget of a scope",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			row, err := c.SetBudget(ctx, adminapi.BudgetRequest{Kind: sc.kind, Name: sc.name, Model: sc.model, Period: sc.period,
				MaxCost: &sc.maxCost, SoftLimit: sc.soft})
			if err != nil {
				return err
			}
			return writeBudgetTable(e.stdout, []adminapi.Budget{row})
		}),
	}
	scopeFlags(set)
	set.Flags().StringVar(&sc.period, "period", "month", "day, week or month (UTC)")
	set.Flags().Float64Var(&sc.maxCost, "max-cost", 0, "GPU-hours per period (0 refuses every request)")
	set.Flags().Float64Var(&sc.soft, "soft-limit", 0, "GPU-hours at which one alert per period is sent (0: none)")
	set.MarkFlagRequired("max-cost")

	del := &cobra.Command{
		Use:   "delete",
		Short: "Delete the budget of a scope",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			if _, err := c.DeleteBudget(ctx, adminapi.BudgetScope{Kind: sc.kind, Name: sc.name, Model: sc.model}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "deleted the budget of %s %q\n", sc.kind, sc.name)
			return nil
		}),
	}
	scopeFlags(del)

	inc := &cobra.Command{
		Use:   "increase",
		Short: "Raise a budget temporarily, until --expires (whatever the period)",
		Args:  cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if _, err := time.Parse(time.RFC3339, sc.expires); err != nil {
				return fmt.Errorf("--expires must be an RFC 3339 time (2026-12-31T00:00:00Z): %w", err)
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			exp, _ := time.Parse(time.RFC3339, sc.expires) // checked in PreRunE
			row, err := c.IncreaseBudget(ctx, adminapi.Increase{Kind: sc.kind, Name: sc.name, Model: sc.model, Amount: sc.amount, ExpiresAt: exp})
			if err != nil {
				return err
			}
			return writeBudgetTable(e.stdout, []adminapi.Budget{row})
		}),
	}
	scopeFlags(inc)
	inc.Flags().Float64Var(&sc.amount, "amount", 0, "GPU-hours added to the limit")
	inc.Flags().StringVar(&sc.expires, "expires", "", "when the increase ends (RFC 3339, within a year)")
	inc.MarkFlagRequired("amount")
	inc.MarkFlagRequired("expires")

	return []*cobra.Command{list, set, del, inc}
}

func writeBudgetTable(w io.Writer, rows []adminapi.Budget) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tMODEL\tPERIOD\tSOURCE\tLIMIT\tINCREASE\tSOFT\tSPENT\tHELD\tREMAINING")
	// GPU-hours to the nano GPU-hour the gateway counts in, no trailing zeros
	num := func(f float64) string { return strconv.FormatFloat(math.Round(f*1e9)/1e9, 'f', -1, 64) }
	for _, r := range rows {
		model := r.Model
		if model == "" {
			model = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Name, model, r.Period, r.Source,
			num(r.EffectiveLimit), num(r.Increase), num(r.SoftLimit), num(r.Spent), num(r.Held), num(r.Remaining))
	}
	return tw.Flush()
}

func (e *env) budgetsClient(cmd *cobra.Command) (*adminapi.Client, error) {
	keyFile := e.v.GetString("budgets.admin-key-file")
	if keyFile == "" {
		if e.configPath() == "" {
			return nil, errors.New("give --admin-key-file, or -c with a configuration that names master_key_file")
		}
		cfg, err := e.loadConfig(cmd, " (its master_key_file authenticates to the admin API)")
		if err != nil {
			return nil, err
		}
		if cfg.MasterKeyFile == "" {
			return nil, errors.New("the configuration names no master_key_file; give --admin-key-file")
		}
		keyFile = cfg.MasterKeyFile
	}
	secret, err := config.ReadSecret(keyFile)
	if err != nil {
		return nil, fmt.Errorf("admin key file: %w", err)
	}
	return newAdminClient(e.v.GetString("budgets.url"), secret)
}
