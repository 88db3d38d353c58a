package layer

import (
	"context"
	"testing"
	"time"
)

// A base's pace waits while a version is written, and goes on once it is: a base
// beside the stream leaves the commit path the machine.
func TestABaseYieldsToAVersion(t *testing.T) {
	c := &Compactor{}
	pace := &basePace{yield: c.yield}
	ctx := context.Background()
	if err := pace.WaitN(ctx, 10); err != nil {
		t.Fatal(err)
	}
	c.commitStarted()
	waited := make(chan error, 1)
	go func() { waited <- pace.WaitN(ctx, 10) }()
	select {
	case err := <-waited:
		t.Fatalf("the base went on while a version was written (%v)", err)
	case <-time.After(100 * time.Millisecond): // the window in which it must not go on
	}
	c.commitEnded()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}
