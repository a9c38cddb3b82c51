package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/adminapi"
)

func adminUpstreams(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list [MODEL]", Short: "List the models' upstreams: configured and runtime, with health (proxy admins and viewers)", Args: cobra.MaximumNArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			var ups []adminapi.Upstream
			var err error
			if len(args) == 1 {
				ups, err = c.ModelUpstreams(ctx, args[0])
			} else {
				ups, err = c.Upstreams(ctx)
			}
			if err != nil {
				return err
			}
			t := &table{cols: []string{"Model", "Upstream", "Source", "Served", "Healthy", "InFlight", "Updated", "By", "BaseURL", "Reason"},
				widths: []int{16, 10, 6, 6, 7, 8, 19, 10, 30, 30}}
			for _, u := range ups {
				healthy, inflight := "", ""
				if u.Healthy != nil {
					healthy = yesNo(*u.Healthy)
				}
				if u.InFlight != nil {
					inflight = fmt.Sprint(*u.InFlight)
				}
				t.add(u.Model, u.Name, u.Source, yesNo(u.Served), healthy, inflight, timeCell(u.UpdatedAt), u.By, u.BaseURL, u.Reason)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	var inheritKey bool
	var keyName string
	write := func(replace bool, verb string) func(ctx context.Context, c *adminapi.Client, args []string) error {
		return func(ctx context.Context, c *adminapi.Client, args []string) error {
			model, name, base := args[0], args[1], args[2]
			req := adminapi.UpstreamRequest{BaseURL: base, InheritKey: inheritKey, KeyName: keyName}
			var err error
			if replace {
				_, err = c.PutUpstream(ctx, model, name, req)
			} else {
				req.Name = name
				_, err = c.AddUpstream(ctx, model, req)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "upstream %s of model %s %s\n", name, model, verb)
			return nil
		}
	}
	add := &cobra.Command{Use: "add MODEL NAME BASE_URL", Short: "Add a runtime upstream to a configured model (no key is sent to it without --inherit-key; proxy admins)", Args: cobra.ExactArgs(3),
		RunE: run(write(false, "added"))}
	set := &cobra.Command{Use: "set MODEL NAME BASE_URL", Short: "Add or replace a runtime upstream (configured ones are changed in the configuration file)", Args: cobra.ExactArgs(3),
		RunE: run(write(true, "set"))}
	for _, c := range []*cobra.Command{add, set} {
		c.Flags().BoolVar(&inheritKey, "inherit-key", false, "send the model's key_file to this engine (recorded in the audit trail): only for an engine of yours")
		c.Flags().StringVar(&keyName, "key-name", "", "send this engine its own key: the name of a file (mode 600) in the configuration's upstream_key_dir")
	}
	remove := &cobra.Command{Use: "remove MODEL NAME", Short: "Remove a runtime upstream", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.RemoveUpstream(ctx, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "upstream %s of model %s removed\n", args[1], args[0])
			return nil
		})}
	return group("upstreams", "Upstreams of the models, added and removed at runtime", list, add, set, remove)
}

func adminAliases(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list", Short: "List the model aliases (proxy admins and viewers)", Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *adminapi.Client, _ []string) error {
			aliases, err := c.Aliases(ctx)
			if err != nil {
				return err
			}
			t := &table{cols: []string{"Alias", "Model", "Served", "Updated", "By", "Reason"}, widths: []int{16, 16, 6, 19, 10, 30}}
			for _, a := range aliases {
				t.add(a.Name, a.Model, yesNo(a.Served), timeCell(&a.UpdatedAt), a.By, a.Reason)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	set := &cobra.Command{Use: "set ALIAS MODEL", Short: "Create an alias of a configured model, or switch it to another (proxy admins)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.SetAlias(ctx, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "alias %s now names model %s\n", args[0], args[1])
			return nil
		})}
	remove := &cobra.Command{Use: "remove ALIAS", Short: "Remove an alias", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminapi.Client, args []string) error {
			if _, err := c.RemoveAlias(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "alias %s removed\n", args[0])
			return nil
		})}
	return group("aliases", "Other names of the models, switched at runtime", list, set, remove)
}
