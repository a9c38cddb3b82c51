package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// escapeSegments escapes each '/'-separated part of a name for a
// {name...} path (an alias may hold slashes, as model names do).
func escapeSegments(s string) string {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func adminUpstreams(e *env, run runner) *cobra.Command {
	var f listFormat
	list := &cobra.Command{Use: "list [MODEL]", Short: "List the models' upstreams: configured and runtime, with health (proxy admins and viewers)", Args: cobra.MaximumNArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			path := "/admin/upstreams"
			if len(args) == 1 {
				path = "/admin/models/" + url.PathEscape(args[0]) + "/upstreams"
			}
			var out struct {
				Data []struct {
					Model     string     `json:"model"`
					Name      string     `json:"name"`
					BaseURL   string     `json:"base_url"`
					Source    string     `json:"source"`
					Served    bool       `json:"served"`
					Reason    string     `json:"reason"`
					Healthy   *bool      `json:"healthy"`
					InFlight  *int64     `json:"in_flight"`
					UpdatedAt *time.Time `json:"updated_at"`
					By        string     `json:"by"`
				} `json:"data"`
			}
			if err := c.do(ctx, "GET", path, nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"Model", "Upstream", "Source", "Served", "Healthy", "InFlight", "Updated", "By", "BaseURL", "Reason"},
				widths: []int{16, 10, 6, 6, 7, 8, 19, 10, 30, 30}}
			for _, u := range out.Data {
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
	write := func(method, verb string) func(ctx context.Context, c *adminClient, args []string) error {
		return func(ctx context.Context, c *adminClient, args []string) error {
			model, name, base := args[0], args[1], args[2]
			path, body := "/admin/models/"+url.PathEscape(model)+"/upstreams", map[string]string{"name": name, "base_url": base}
			if method == "PUT" {
				path += "/" + url.PathEscape(name)
				body = map[string]string{"base_url": base}
			}
			if err := c.do(ctx, method, path, body, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "upstream %s of model %s %s\n", name, model, verb)
			return nil
		}
	}
	add := &cobra.Command{Use: "add MODEL NAME BASE_URL", Short: "Add a runtime upstream to a configured model (it gets the model's key_file; proxy admins)", Args: cobra.ExactArgs(3),
		RunE: run(write("POST", "added"))}
	set := &cobra.Command{Use: "set MODEL NAME BASE_URL", Short: "Add or replace a runtime upstream (configured ones are changed in the configuration file)", Args: cobra.ExactArgs(3),
		RunE: run(write("PUT", "set"))}
	remove := &cobra.Command{Use: "remove MODEL NAME", Short: "Remove a runtime upstream", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "DELETE", "/admin/models/"+url.PathEscape(args[0])+"/upstreams/"+url.PathEscape(args[1]), nil, nil); err != nil {
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
		RunE: run(func(ctx context.Context, c *adminClient, _ []string) error {
			var out struct {
				Data []struct {
					Name      string    `json:"name"`
					Model     string    `json:"model"`
					Served    bool      `json:"served"`
					Reason    string    `json:"reason"`
					UpdatedAt time.Time `json:"updated_at"`
					By        string    `json:"by"`
				} `json:"data"`
			}
			if err := c.do(ctx, "GET", "/admin/aliases", nil, &out); err != nil {
				return err
			}
			t := &table{cols: []string{"Alias", "Model", "Served", "Updated", "By", "Reason"}, widths: []int{16, 16, 6, 19, 10, 30}}
			for _, a := range out.Data {
				t.add(a.Name, a.Model, yesNo(a.Served), timeCell(&a.UpdatedAt), a.By, a.Reason)
			}
			t.write(e.stdout, f)
			return nil
		})}
	f.flags(list)
	set := &cobra.Command{Use: "set ALIAS MODEL", Short: "Create an alias of a configured model, or switch it to another (proxy admins)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "PUT", "/admin/aliases/"+escapeSegments(args[0]), map[string]string{"model": args[1]}, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "alias %s now names model %s\n", args[0], args[1])
			return nil
		})}
	remove := &cobra.Command{Use: "remove ALIAS", Short: "Remove an alias", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c *adminClient, args []string) error {
			if err := c.do(ctx, "DELETE", "/admin/aliases/"+escapeSegments(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "alias %s removed\n", args[0])
			return nil
		})}
	return group("aliases", "Other names of the models, switched at runtime", list, set, remove)
}
