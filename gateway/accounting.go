package gateway

import "github.com/go-llmflow/llmflow/accounting"

// RecordWriter is what the gateway needs of a store to keep accounting
// records: WriteRecords must be idempotent per RequestID and return once
// its context ends (see accounting.Writer).
type RecordWriter = accounting.Writer
