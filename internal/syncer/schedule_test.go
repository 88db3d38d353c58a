package syncer

import (
	"testing"
	"time"
)

func TestScheduleAlignsEveryAcrossReplicas(t *testing.T) {
	s, err := ParseSchedule("@every 5m")
	if err != nil {
		t.Fatal(err)
	}
	// Two replicas asking at different moments within one interval get the same tick.
	a := s.Next(time.Date(2026, 1, 1, 10, 1, 13, 0, time.UTC))
	b := s.Next(time.Date(2026, 1, 1, 10, 4, 59, 0, time.UTC))
	want := time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)
	if !a.Equal(want) || !b.Equal(want) {
		t.Errorf("Next = %s, %s; want %s for both", a, b, want)
	}
	if s.Number(a) != s.Number(b) || s.Number(s.Next(a)) != s.Number(a)+1 {
		t.Errorf("slots %d, %d, next %d; want equal, then +1", s.Number(a), s.Number(b), s.Number(s.Next(a)))
	}
}

func TestScheduleCronSpec(t *testing.T) {
	s, err := ParseSchedule("*/15 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	got := s.Next(time.Date(2026, 1, 1, 10, 1, 0, 0, time.UTC))
	if want := time.Date(2026, 1, 1, 10, 15, 0, 0, time.Local); !got.Equal(want) {
		t.Errorf("Next = %s; want %s", got, want)
	}
	if _, err := ParseSchedule("every day"); err == nil {
		t.Error("ParseSchedule(every day) = nil error")
	}
}
