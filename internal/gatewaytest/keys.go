package gatewaytest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Keys is a hand-written in-memory key store (the gateway's key lookup
// and the admin API's key writes) that counts lookups.
type Keys struct {
	Lookups atomic.Int64 // KeyByHash calls

	mu     sync.Mutex
	byHash map[[32]byte]llmflow.Key
	fail   error // returned by KeyByHash when set
}

// NewKeys returns an empty key store.
func NewKeys() *Keys { return &Keys{byHash: make(map[[32]byte]llmflow.Key)} }

// SetFail makes KeyByHash return err (nil: answer again).
func (f *Keys) SetFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *Keys) KeyByHash(ctx context.Context, h [32]byte) (llmflow.Key, error) {
	f.Lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return llmflow.Key{}, f.fail
	}
	k, ok := f.byHash[h]
	if !ok {
		return llmflow.Key{}, llmflow.ErrNotFound
	}
	return k, nil
}

func (f *Keys) CreateKey(ctx context.Context, k llmflow.Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byHash[k.Hash] = k
	return nil
}

func (f *Keys) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.byHash {
		if k.ID == id {
			return k, nil
		}
	}
	return llmflow.Key{}, llmflow.ErrNotFound
}

func (f *Keys) ListKeys(ctx context.Context, flt llmflow.KeyFilter) ([]llmflow.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []llmflow.Key
	for _, k := range f.byHash {
		if (flt.Team == "" || k.Team == flt.Team) && (flt.IncludeRevoked || k.Active()) {
			out = append(out, k)
		}
	}
	return out, nil
}

func (f *Keys) RevokeKey(ctx context.Context, id string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for h, k := range f.byHash {
		if k.ID == id {
			k.RevokedAt = at
			f.byHash[h] = k
			return nil
		}
	}
	return llmflow.ErrNotFound
}
