package cli

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// schedule is the syncer's cron schedule, with slots every replica agrees on.
//
// robfig/cron's "@every d" counts from when the process started, so two replicas would
// tick at different times; here "@every d" ticks at the multiples of d since the Unix
// epoch instead, and a tick's slot is tick/d. Cron specs already tick at wall-clock
// times every replica shares; their slot is the tick's Unix second.
type schedule struct {
	spec  string
	every time.Duration
	cron  cron.Schedule
}

func parseSchedule(spec string) (schedule, error) {
	s, err := cronParser.Parse(spec)
	if err != nil {
		return schedule{}, fmt.Errorf("schedule %q: %v", spec, err)
	}
	sc := schedule{spec: spec, cron: s}
	if cd, ok := s.(cron.ConstantDelaySchedule); ok {
		sc.every = cd.Delay
	}
	return sc, nil
}

// Next returns the first tick after t.
func (s schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		ms := s.every.Milliseconds()
		return time.UnixMilli((t.UnixMilli()/ms + 1) * ms)
	}
	return s.cron.Next(t)
}

// Slot returns the slot of a tick: floor(tick / interval).
func (s schedule) Slot(tick time.Time) int64 {
	if s.every > 0 {
		return tick.UnixMilli() / s.every.Milliseconds()
	}
	return tick.Unix()
}
