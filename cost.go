package llmflow

// Cost is what a model's tokens cost, in GPU-hours per million tokens: the
// unit budgets, fair-share usage, reports and the write-back to slurmdbd
// all count in.
type Cost struct {
	InputPerMTok  float64 // prompt tokens not served from the prefix cache
	OutputPerMTok float64 // completion tokens
	CachedPerMTok float64 // prompt tokens served from the prefix cache
}

// GPUHours is the cost of one request:
// ((prompt − cached) × input + cached × cached_price + completion × output) / 10⁶.
// Cached tokens beyond the prompt are counted as prompt tokens.
func (c Cost) GPUHours(prompt, completion, cached int64) float64 {
	if cached > prompt {
		cached = prompt
	}
	return (float64(prompt-cached)*c.InputPerMTok + float64(cached)*c.CachedPerMTok + float64(completion)*c.OutputPerMTok) / 1e6
}
