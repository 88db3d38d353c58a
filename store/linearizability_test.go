package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// The pointer is a fenced register. Its state, as the model sees it:
type regState struct {
	Version string // "" while nothing is published
	Fence   uint64
	Source  uint64
	Pinned  bool
}

// regInput is one operation on the register.
type regInput struct {
	Op       string // "read", "flip" or "fence"
	Version  string // flip: the new version
	Expected string // flip: the version the caller believes is current
	Token    uint64 // flip, fence
	Source   uint64 // flip
	Rollback bool   // flip: an operator's flip (may move a pinned pointer, may go back)
	Pin      bool   // flip
}

// regOutput is what the operation returned.
type regOutput struct {
	OK      bool     // flip: applied
	Unknown bool     // flip, fence: the outcome is unknown (a lost reply the store could not resolve)
	State   regState // read: the pointer read
}

// fencedRegister is the model of store.FlipPointer / AdvanceFence / ReadPointer that
// docs/design.md asks for: a flip applies exactly when the stored fence is not above its
// token, the pointer is not pinned (unless rolling back), the stored source is not
// ahead of the new one (unless rolling back), and the stored version is the expected
// one; a fence advance never lowers the fence; a read returns the state. An operation
// whose outcome is unknown may have taken effect or not, so the model is
// nondeterministic.
var fencedRegister = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		switch in.Op {
		case "read":
			if out.State.Version == s.Version && (s.Version == "" || out.State == s) {
				return []any{s}
			}
			return nil
		case "fence":
			advanced := s
			advanced.Fence = max(s.Fence, in.Token)
			if out.Unknown {
				return []any{s, advanced}
			}
			return []any{advanced}
		case "flip":
			applies := s.Fence <= in.Token && s.Version == in.Expected &&
				(in.Rollback || (!s.Pinned && s.Source <= in.Source))
			flipped := regState{Version: in.Version, Fence: in.Token, Source: in.Source, Pinned: in.Pin}
			switch {
			case out.Unknown && applies:
				return []any{s, flipped}
			case out.Unknown:
				return []any{s}
			case out.OK && applies:
				return []any{flipped}
			case !out.OK && !applies:
				return []any{s}
			}
		}
		return nil
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch in.Op {
		case "read":
			return fmt.Sprintf("read → %s fence %d src %d pinned %t", out.State.Version, out.State.Fence, out.State.Source, out.State.Pinned)
		case "fence":
			return fmt.Sprintf("fence %d (unknown %t)", in.Token, out.Unknown)
		}
		return fmt.Sprintf("flip %s→%s tok %d src %d rb %t pin %t → ok %t unknown %t", in.Expected, in.Version, in.Token, in.Source, in.Rollback, in.Pin, out.OK, out.Unknown)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("%s fence %d src %d pinned %t", s.Version, s.Fence, s.Source, s.Pinned)
	},
}).ToModel()

// TestPointerIsLinearizable records a history of reads, flips (scheduled and rollback,
// pinning and not, with current, stale and future tokens and expected versions) and fence
// advances from concurrent clients against the real store and checks it with porcupine
// against the fenced-register model. On failure the history is written as an HTML
// visualisation. 8 clients × 150 operations here; SNAPFLIP_LIN_OPS per client in make chaos.
func TestPointerIsLinearizable(t *testing.T) { checkPointerHistory(t, 0) }

// TestPointerIsLinearizableWithLostReplies: the same with one conditional write in ten
// losing its reply (the write applies) or its request (it does not). The store resolves
// what it can by re-reading; a flip or fence advance it cannot resolve is recorded as
// of unknown outcome — it may take effect at any time after its call, or never.
func TestPointerIsLinearizableWithLostReplies(t *testing.T) { checkPointerHistory(t, 0.1) }

func checkPointerHistory(t *testing.T, faults float64) {
	cfg := testenv.StoreConfig(testenv.Bigtable(t))
	if faults > 0 {
		cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method != "/google.bigtable.v2.Bigtable/CheckAndMutateRow" || rand.Float64() >= faults {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			if rand.IntN(2) == 0 {
				return status.Error(codes.Unavailable, "injected: request lost")
			}
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "injected: reply lost")
		})}
	}
	st := testenv.Store(t, cfg)
	const clients = 8
	opsPerClient := 150 // SNAPFLIP_LIN_OPS in the long form (make chaos)
	if n, err := strconv.Atoi(os.Getenv("SNAPFLIP_LIN_OPS")); err == nil && n > 0 {
		opsPerClient = n
	}
	ctx := context.Background()
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			var seen regState     // this client's last read, to make plausible flips
			known := []string{""} // versions this client has seen, for stale expectations
			for i := range opsPerClient {
				var in regInput
				switch r := rng.IntN(10); {
				case r < 4:
					in = regInput{Op: "read"}
				case r < 9:
					expected := seen.Version
					if rng.IntN(4) == 0 {
						expected = known[rng.IntN(len(known))]
					}
					// Tokens and sources near what was read: stale, equal or ahead.
					token, source := seen.Fence+uint64(rng.IntN(3)), seen.Source+uint64(rng.IntN(3))
					if token > 0 && rng.IntN(3) == 0 {
						token--
					}
					if source > 0 && rng.IntN(3) == 0 {
						source--
					}
					rollback := rng.IntN(4) == 0
					// Every flip names a version of its own, as every publish does, so
					// that a re-read showing it proves this flip applied.
					in = regInput{Op: "flip", Version: fmt.Sprintf("c%d-%d", c, i), Expected: expected,
						Token: max(token, 1), Source: source, Rollback: rollback, Pin: rollback && rng.IntN(2) == 0}
				default:
					in = regInput{Op: "fence", Token: seen.Fence + uint64(rng.IntN(2))}
				}
				call := time.Since(start).Nanoseconds()
				var out regOutput
				switch in.Op {
				case "read":
					p, err := st.ReadPointer(ctx, "lin")
					if err != nil && !errors.Is(err, snapshot.ErrNoVersion) {
						t.Errorf("read: %v", err)
						return
					}
					out.State = regState{Version: string(p.Version), Fence: p.Fence, Source: p.Source.LSN, Pinned: p.Pinned}
					seen = out.State
					known = append(known, seen.Version)
				case "flip":
					_, err := st.FlipPointer(ctx, "lin", snapshot.Flip{Version: snapshot.Version(in.Version), Expected: snapshot.Version(in.Expected),
						Fence: in.Token, Source: snapshot.Position{LSN: in.Source}, Rollback: in.Rollback, Pin: in.Pin, At: time.Now()})
					switch {
					case err == nil:
						out.OK = true
					case errors.Is(err, snapshot.ErrOutcomeUnknown):
						out.Unknown = true
					case errors.Is(err, snapshot.ErrFenced), errors.Is(err, snapshot.ErrPinned),
						errors.Is(err, snapshot.ErrSourceBehind), errors.Is(err, snapshot.ErrConflict):
					default:
						t.Errorf("flip: %v", err)
						return
					}
				case "fence":
					if err := st.AdvanceFence(ctx, "lin", in.Token); err != nil {
						if faults == 0 {
							t.Errorf("fence: %v", err)
							return
						}
						out.Unknown = true
					}
				}
				ret := time.Since(start).Nanoseconds()
				if out.Unknown {
					ret = math.MaxInt64 // it may take effect at any time after its call
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	applied, rejected, unknown := 0, 0, 0
	for _, op := range history {
		switch out := op.Output.(regOutput); {
		case op.Input.(regInput).Op != "flip":
		case out.Unknown:
			unknown++
		case out.OK:
			applied++
		default:
			rejected++
		}
	}
	// The history must exercise both outcomes, or it proves little.
	if applied < 20 || rejected < 20 {
		t.Fatalf("history has %d applied and %d rejected flips; want at least 20 of each", applied, rejected)
	}
	res, info := porcupine.CheckOperationsVerbose(fencedRegister, history, time.Minute)
	t.Logf("%d operations from %d clients (flips: %d applied, %d rejected, %d unknown): %s",
		len(history), clients, applied, rejected, unknown, res)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("snapflip-pointer-history-%d.html", time.Now().UnixNano()))
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(fencedRegister, info, f)
			f.Close()
		}
		t.Fatalf("the pointer's history is %s against the fenced-register model; visualisation: %s", res, path)
	}
	if (faults > 0) != (unknown > 0) {
		t.Errorf("%d flips of unknown outcome; want some exactly when faults are injected", unknown)
	}
}

// TestLinearizabilityCheckerCatchesAViolation: the same check fails a history in which
// a flip with a stale token applied, so the test above can fail.
func TestLinearizabilityCheckerCatchesAViolation(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: regInput{Op: "flip", Version: "v1", Token: 5, Source: 1}, Call: 0, Output: regOutput{OK: true}, Return: 10},
		{ClientId: 1, Input: regInput{Op: "flip", Version: "v2", Expected: "v1", Token: 4, Source: 2}, Call: 20, Output: regOutput{OK: true}, Return: 30},
	}
	if res := porcupine.CheckOperations(fencedRegister, ops); res {
		t.Error("a flip with a token below the fence was accepted by the model")
	}
	ops[1].Output = regOutput{OK: false}
	if res := porcupine.CheckOperations(fencedRegister, ops); !res {
		t.Error("the correct history was rejected by the model")
	}
}
