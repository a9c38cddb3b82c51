package vllmsim_test

import (
	"fmt"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// Driving the scheduler step by step: with one running slot, the
// priority-0 request that arrived second is served before the priority-10
// one.
func ExampleScheduler() {
	s := vllmsim.NewScheduler(vllmsim.SchedConfig{MaxNumSeqs: 1})
	s.Add(&vllmsim.Seq{ID: 1, Priority: 10, Arrival: 1, PromptTokens: 16, MaxTokens: 2})
	s.Add(&vllmsim.Seq{ID: 2, Priority: 0, Arrival: 2, PromptTokens: 16, MaxTokens: 2})
	for s.HasWork() {
		r := s.Step()
		fmt.Println(r.Step, r.Admitted, r.Emitted, r.Finished, r.Running, r.Waiting)
	}
	// Output:
	// 1 [2] [{2 0}] [] 1 1
	// 2 [] [{2 1}] [2] 0 1
	// 3 [1] [{1 0}] [] 1 0
	// 4 [] [{1 1}] [1] 0 0
}
