package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/vllmsim"
)

func vllmsimCmd(e *env) *cobra.Command {
	var sc vllmsim.Config
	var models, keyFile string
	cmd := &cobra.Command{
		Use:   "vllmsim",
		Short: "Run a simulated vLLM (priority scheduler, KV blocks, preemption) behind the OpenAI API",
		Long: "vllmsim simulates vLLM's V1 scheduler: a waiting heap on (priority, arrival), KV blocks,\n" +
			"recompute preemption of the running request with the largest (priority, arrival), one token\n" +
			"per running request per step. It serves /v1/chat/completions, /v1/completions,\n" +
			"/v1/embeddings, /v1/responses, /v1/models (and /v1/models/{id}), /health and /metrics\n" +
			"(vllm:num_requests_running, …).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.logger(cmd)
			if err != nil {
				return err
			}
			if keyFile != "" {
				k, err := config.ReadSecret(keyFile)
				if err != nil {
					return fmt.Errorf("--api-key-file: %w", err)
				}
				sc.APIKey = k
			}
			sc.Models = strings.Split(models, ",")
			sc.Log = log
			addr, _ := cmd.Flags().GetString("listen")
			sim := vllmsim.New(sc)
			defer sim.Close()
			log.Info("vllmsim listening", "addr", addr, "models", sc.Models, "policy", sc.Sched.Policy)
			return sim.ListenAndServe(cmd.Context(), addr)
		},
	}
	f := cmd.Flags()
	f.String("listen", "127.0.0.1:8001", "address to listen on")
	f.StringVar(&models, "model", "sim/llama", "served model names, comma-separated")
	f.StringVar(&keyFile, "api-key-file", "", "file holding the API key clients must send (like vLLM --api-key)")
	f.StringVar(&sc.Sched.Policy, "scheduling-policy", "priority", "priority or fcfs")
	f.IntVar(&sc.Sched.MaxNumSeqs, "max-num-seqs", 256, "maximum running requests")
	f.IntVar(&sc.Sched.KVBlocks, "kv-blocks", 4096, "KV cache blocks")
	f.IntVar(&sc.Sched.BlockSize, "block-size", 16, "tokens per KV block")
	f.DurationVar(&sc.StepInterval, "step", 0, "wall time per engine step (default 20ms)")
	f.IntVar(&sc.DefaultMaxTokens, "default-max-tokens", 16, "tokens generated when a request sets no max_tokens")
	f.BoolVar(&sc.ForceIncludeUsage, "enable-force-include-usage", false, "send usage on every stream")
	e.logFlags(cmd, "info")
	return cmd
}
