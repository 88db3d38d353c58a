package syncer

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser accepts 5-field specs and descriptors such as "@every 5m".
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is the syncer's cron schedule, with tick numbers every replica agrees on.
//
// robfig/cron's "@every d" counts from when the process started, so two replicas would
// tick at different times; here "@every d" ticks at the multiples of d since the Unix
// epoch instead, and a tick's number is tick/d. Cron specs already tick at wall-clock
// times every replica shares; a tick's number is its Unix second.
type Schedule struct {
	spec  string // as the config gives it
	every time.Duration
	cron  cron.Schedule
}

// ParseSchedule parses a cron spec (5 fields) or a descriptor such as "@every 5m".
func ParseSchedule(spec string) (Schedule, error) {
	s, err := cronParser.Parse(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule %q: %v", spec, err)
	}
	sc := Schedule{spec: spec, cron: s}
	if cd, ok := s.(cron.ConstantDelaySchedule); ok {
		sc.every = cd.Delay
	}
	return sc, nil
}

// Next returns the first tick after t.
func (s Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		ms := s.every.Milliseconds()
		return time.UnixMilli((t.UnixMilli()/ms + 1) * ms)
	}
	return s.cron.Next(t)
}

// Number returns the number of a tick: floor(tick / interval).
func (s Schedule) Number(tick time.Time) int64 {
	if s.every > 0 {
		return tick.UnixMilli() / s.every.Milliseconds()
	}
	return tick.Unix()
}

// String returns the spec the schedule was parsed from.
func (s Schedule) String() string { return s.spec }
