package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/internal/demo"
)

func demoCmd(e *env) *cobra.Command {
	var o demo.Options
	var control, fair bool // only the control run, only the fair-share run
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch two institutions share a simulated vLLM: running fractions with and without fair share",
		Long: "demo starts a simulated vLLM (priority scheduler, KV blocks sized for --capacity concurrent\n" +
			"requests) and a gateway with two institutions, etabA (share 0.8125) and etabB (0.1875), each\n" +
			"with --clients closed-loop clients; etabB starts after --b-after. It prints, every second, how\n" +
			"many requests of each institution the engine is running, first with the gateway's fair-share\n" +
			"priorities, then the control: every request at priority 0, as without llmflow.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			runs := []bool{true, false}
			switch {
			case fair && !control:
				runs = []bool{true}
			case control && !fair:
				runs = []bool{false}
			}
			o.Version = buildVersion()
			for _, fair := range runs {
				if err := demo.Run(cmd.Context(), e.stdout, o, fair); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Capacity, "capacity", 16, "the pool's sustainable concurrency C")
	f.IntVar(&o.Clients, "clients", 32, "closed-loop clients per institution")
	f.DurationVar(&o.BAfter, "b-after", 5*time.Second, "when etabB's clients start")
	f.DurationVar(&o.Duration, "duration", 20*time.Second, "length of each run")
	f.DurationVar(&o.Step, "step", 5*time.Millisecond, "the simulated engine's decode step")
	f.BoolVar(&fair, "fair-only", false, "only the run with fair-share priorities")
	f.BoolVar(&control, "control-only", false, "only the control run (every request at priority 0)")
	return cmd
}
