package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/go-llmflow/llmflow/slurmsync"
)

// blockingSource is a Slurm source whose import hangs until its context
// ends, as a slurmdbd that stopped answering does.
type blockingSource struct {
	entered chan struct{}
	running atomic.Bool
	sawDone atomic.Bool
}

func (b *blockingSource) Tree(ctx context.Context) (*sacctmgr.Tree, error) {
	b.running.Store(true)
	defer b.running.Store(false)
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	b.sawDone.Store(true)
	return nil, ctx.Err()
}

type nopSink struct{ reads atomic.Int32 }

func (s *nopSink) Accounts(context.Context) (llmflow.Accounts, error) {
	s.reads.Add(1)
	return nil, nil
}

func (s *nopSink) SaveSync(context.Context, llmflow.Accounts, llmflow.SyncRun) (int64, error) {
	return 1, nil
}

// fakeTrees records what the import hands to the gateway.
type fakeTrees struct {
	mu    sync.Mutex
	calls int
}

func (f *fakeTrees) SetAccounts(llmflow.Accounts) { f.mu.Lock(); f.calls++; f.mu.Unlock() }
func (f *fakeTrees) ReportSync(llmflow.SyncRun)   { f.mu.Lock(); f.calls++; f.mu.Unlock() }

// TestSlurmImportCloseStopsRunningImport: a generation's close (a reload,
// a shutdown) cancels the import it started and waits for it, even one
// hung on its source, and only then releases the source; afterwards
// nothing of that generation imports or serves a tree (a reload from
// another replica's announcement included). Before, close waited forever
// on a hung import, or the import ran on against a stopped generation
// with a closed source.
func TestSlurmImportCloseStopsRunningImport(t *testing.T) {
	src := &blockingSource{entered: make(chan struct{}, 1)}
	sink := &nopSink{}
	var srcOpenWhenClosed atomic.Bool
	imp := &slurmImport{
		cfg:    &config.Config{Slurm: &config.Slurm{Schedule: "@every 1h"}},
		syncer: &slurmsync.Syncer{Source: src, Name: "test", Sink: sink},
		closeSrc: func() error {
			srcOpenWhenClosed.Store(src.running.Load())
			return nil
		},
		log: slog.New(slog.DiscardHandler),
	}
	imp.current.Store(&llmflow.Accounts{})
	gw := &fakeTrees{}
	imp.start(context.Background(), gw) // the process's context: it never ends here
	select {
	case <-src.entered:
	case <-time.After(time.Minute):
		t.Fatal("the first import did not start")
	}

	closed := make(chan struct{})
	go func() {
		imp.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("close did not return while an import hung on its source")
	}
	if !src.sawDone.Load() {
		t.Error("the running import was not cancelled")
	}
	if srcOpenWhenClosed.Load() {
		t.Error("the source was released while an import still used it")
	}
	reads := sink.reads.Load()
	if err := imp.reload(context.Background(), gw); err != nil {
		t.Errorf("reload after close: %v", err)
	}
	imp.run(context.Background(), gw)
	if sink.reads.Load() != reads {
		t.Error("a closed import read the store again")
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if gw.calls != 0 {
		t.Errorf("a cancelled or closed import handed the gateway %d results", gw.calls)
	}
}
