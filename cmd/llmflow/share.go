package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/config"
)

func shareCmd(e *env) *cobra.Command {
	var parsable2, parsable, noHeader bool
	var pool, keyFile string
	cmd := &cobra.Command{
		Use:   "share",
		Short: "Print a running gateway's fair-share state like sshare -l",
		Long: "share asks a running gateway (GET /admin/fairshare, with the master key) for its fair-share\n" +
			"state and prints it in the layout of `sshare -a -l`: one row per account and per user\n" +
			"association (User column, imported from Slurm with its shares) of each pool, the pool as\n" +
			"root, indented by depth, with sshare's columns where they mean the same and\n" +
			"Reserved, InFlight, Borrowing added. RawUsage is in GPU-seconds (sshare's unit when billing\n" +
			"counts GPUs), decayed with the configured half-life.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" {
				path := e.configPath()
				if path == "" {
					return fmt.Errorf("need the master key: pass --master-key-file, or -c FILE to take it from the configuration")
				}
				cfg, err := config.Load(path)
				if err != nil {
					return err
				}
				keyFile = cfg.MasterKeyFile
			}
			key, err := config.ReadSecret(keyFile)
			if err != nil {
				return fmt.Errorf("master key: %w", err)
			}
			rep, err := fetchFairshare(cmd.Context(), e.str(cmd, "url"), key)
			if err != nil {
				return err
			}
			sep := ""
			switch {
			case parsable2:
				sep = "|"
			case parsable:
				sep = "|"
			}
			return writeShare(e.stdout, rep, pool, sep, parsable, noHeader)
		},
	}
	f := cmd.Flags()
	f.String("url", "http://127.0.0.1:8080", "the gateway's base URL (LLMFLOW_ADMIN_URL, as llmflow admin)")
	f.StringVar(&keyFile, "master-key-file", "", "file holding the master key")
	f.StringVar(&pool, "pool", "", "only this pool")
	f.BoolVarP(&parsable2, "parsable2", "P", false, "fields separated by '|', no trailing '|'")
	f.BoolVarP(&parsable, "parsable", "p", false, "fields separated by '|', with a trailing '|'")
	f.BoolVarP(&noHeader, "noheader", "n", false, "no header line")
	e.bindURL(cmd)
	return cmd
}

// fetchFairshare asks the gateway at base for GET /admin/fairshare with
// the master key.
func fetchFairshare(ctx context.Context, base, key string) (*adminapi.FairshareReport, error) {
	c, err := newAdminClient(base, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := c.Fairshare(ctx)
	var (
		ae *adminapi.Error
		ue *url.Error
	)
	switch {
	case errors.As(err, &ae):
		return nil, fmt.Errorf("gateway answered %d: %s", ae.Status, ae.Message)
	case errors.As(err, &ue):
		return nil, fmt.Errorf("ask the gateway: %w", ue)
	case err != nil:
		return nil, err
	}
	return &rep, nil
}

// shareColumns are sshare -l's columns (the GrpTRES ones aside) and ours;
// widths are sshare's in its table form.
var shareColumns = []struct {
	name  string
	width int
	left  bool
}{
	{"Pool", 10, true}, {"Account", 20, true}, {"User", 10, false}, {"RawShares", 10, false},
	{"NormShares", 11, false}, {"RawUsage", 11, false}, {"NormUsage", 11, false},
	{"EffectvUsage", 13, false}, {"FairShare", 10, false}, {"LevelFS", 10, false},
	{"Reserved", 8, false}, {"InFlight", 8, false}, {"Borrowing", 9, false},
}

// writeShare prints rep like sshare -a -l: sep "" is the table form.
func writeShare(w io.Writer, rep *adminapi.FairshareReport, pool, sep string, trailing, noHeader bool) error {
	var rows [][]string
	for _, p := range rep.Pools {
		if pool != "" && p.Pool != pool {
			continue
		}
		for _, a := range p.Accounts {
			rows = append(rows, shareRow(p.Pool, a))
		}
	}
	if pool != "" && len(rows) == 0 {
		return fmt.Errorf("no pool %q", pool)
	}
	var b strings.Builder
	line := func(cells []string) {
		for i, c := range cells {
			col := shareColumns[i]
			switch {
			case sep != "":
				if i > 0 {
					b.WriteString(sep)
				}
				b.WriteString(c)
			default:
				if i > 0 {
					b.WriteByte(' ')
				}
				if len(c) > col.width {
					c = c[:col.width]
				}
				pad := strings.Repeat(" ", col.width-len(c))
				if col.left {
					b.WriteString(c + pad)
				} else {
					b.WriteString(pad + c)
				}
			}
		}
		if sep != "" && trailing {
			b.WriteString(sep)
		}
		b.WriteByte('\n')
	}
	if !noHeader {
		head := make([]string, len(shareColumns))
		dash := make([]string, len(shareColumns))
		for i, c := range shareColumns {
			head[i] = c.name
			dash[i] = strings.Repeat("-", c.width)
		}
		line(head)
		if sep == "" {
			b.WriteString(strings.Join(dash, " ") + "\n")
		}
	}
	for _, r := range rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func shareRow(pool string, a adminapi.AccountShare) []string {
	f6 := func(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }

	raw := strconv.FormatFloat(a.RawShares, 'f', -1, 64)
	if a.UseParent {
		raw = "parent"
	}
	name := a.Account
	if a.Depth > 0 {
		name = strings.Repeat(" ", a.Depth) + name
	}
	if a.Depth == 0 {
		raw = ""
	}
	return []string{
		pool, name, a.User, raw, f6(a.NormShares),
		strconv.FormatInt(int64(a.RawUsage*3600), 10), // GPU-seconds, truncated as sshare prints RawUsage
		f6(a.NormUsage), f6(a.EffectvUsage), a.FairShare.String(), a.LevelFS.String(),
		strconv.Itoa(a.Reserved), strconv.Itoa(a.InFlight), strconv.Itoa(a.Borrowing),
	}
}
