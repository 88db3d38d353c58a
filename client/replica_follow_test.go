package client

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReadFlips(t *testing.T) {
	const v1, v2 = "00000000-0000-4000-8000-000000000000-1", "00000000-0000-4000-8000-000000000000-2"
	stream := "retry: 2000\n\n" +
		": heartbeat\n\n" +
		"id: " + v1 + "\nevent: flip\ndata: {\"version\":\"" + v1 + "\",\"kind\":\"base\"}\n\n" +
		"event: heartbeat\ndata: {\"version\":\"" + v1 + "\"}\n\n" + // not a flip
		"event: flip\ndata: {\"version\":\"not-a-version\"}\n\n" + // names no version
		"event: flip\ndata: {\"version\":\n" + "data: \"" + v2 + "\"}\n\n" + // data over two lines
		"event: covered\ndata: {\"version\":\"" + v2 + "\",\"covers\":\"s:9:9:\"}\n\n" +
		"event: flip\ndata: {\"version\":\"" + v1 + "\",\"token\":\"s:5:7:5\",\"covers\":\"s:8:8:\",\"pinned\":true,\"new\":[1]}\n\n" +
		"event: resharded\ndata: {\"version\":\"" + v2 + "\"}\n\n" + // an event of a newer API
		"event: covered\ndata: {\"covers\":\"s:9:9:\"}\n\n" + // names no version
		"event: flip\ndata: {\"version\":\"" + v1 + "\"}\n" // cut before its end
	var got []string
	lines := 0
	err := readFlips(strings.NewReader(stream), func() { lines++ }, func(kind streamEvent, p pointer) {
		got = append(got, fmt.Sprintf("%d %s %s %s %v", kind, p.Version, p.Token, p.Covers, p.Pinned))
	})
	want := []string{
		fmt.Sprintf("%d %s   false", eventFlip, v1),
		fmt.Sprintf("%d %s   false", eventFlip, v2),
		fmt.Sprintf("%d %s  s:9:9: false", eventCovered, v2),
		fmt.Sprintf("%d %s s:5:7:5 s:8:8: true", eventFlip, v1),
	}
	if !cmp.Equal(want, got) {
		t.Errorf("flips (-want +got):\n%s", cmp.Diff(want, got))
	}
	if want := strings.Count(stream, "\n"); lines != want {
		t.Errorf("alive called %d times; want once a line, %d", lines, want)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("readFlips at the end of the body = %v; want io.ErrUnexpectedEOF", err)
	}
}

func TestStreamPause(t *testing.T) {
	for _, tc := range []struct {
		retry   time.Duration
		refused int
		want    time.Duration
	}{
		{2 * time.Second, 0, 2 * time.Second}, // a stream that ended
		{2 * time.Second, 1, 2 * time.Second},
		{2 * time.Second, 2, 4 * time.Second},
		{2 * time.Second, 4, 16 * time.Second},
		{2 * time.Second, 5, 30 * time.Second},
		{2 * time.Second, 1000, 30 * time.Second},
		{time.Minute, 0, time.Minute},
		{time.Minute, 1, time.Minute},
		{time.Minute, 2, 30 * time.Second},
	} {
		f := &follower{cfg: ReplicaConfig{StreamRetry: tc.retry}}
		if got := f.pause(tc.refused); got != tc.want {
			t.Errorf("StreamRetry %s, refused %d times: pause = %s; want %s", tc.retry, tc.refused, got, tc.want)
		}
	}
}
