package index

import (
	"encoding/binary"
	"math"
)

// Postgres' ranges, as days or microseconds since 2000-01-01 (its epoch): dates from
// 4714-11-24 BC (Julian day 0) to 5874897-12-31, timestamps from 4714-11-24 BC to
// 294276-12-31 23:59:59.999999.
const (
	minDate      = -2451545
	endDate      = 2147483494 - 2451545
	minTimestamp = -211813488000000000
	endTimestamp = 9223371331200000000
	usPerDay     = 86400 * 1000000
)

// datetime is a date and time as written, before validation.
type datetime struct {
	year, month, day     int64
	hour, min, sec, usec int64
	hasTime, hasOff      bool
	off                  int64 // seconds east of UTC
	bc                   bool
}

// appendTime appends a date (days) or timestamp (microseconds) as a big-endian integer
// with its sign bit flipped, after its tag; -infinity and infinity are the integer's
// extremes, as in Postgres. s is the value without JSON quotes.
func appendTime(dst []byte, t Type, s []byte) ([]byte, error) {
	v, err := parseTime(t, s)
	if err != nil {
		return dst, err
	}
	if t == TypeDate {
		dst = append(dst, tagDate)
		return binary.BigEndian.AppendUint32(dst, uint32(int32(v))^0x80000000), nil
	}
	dst = append(dst, tagTimestamp)
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63)), nil
}

// parseTime returns a date's days or a timestamp's microseconds since 2000-01-01 (for
// timestamptz, of the instant in UTC).
func parseTime(t Type, s []byte) (int64, error) {
	switch string(s) {
	case "infinity":
		if t == TypeDate {
			return math.MaxInt32, nil
		}
		return math.MaxInt64, nil
	case "-infinity":
		if t == TypeDate {
			return math.MinInt32, nil
		}
		return math.MinInt64, nil
	}
	dt, ok := scanDatetime(s)
	if !ok {
		return 0, bad("want %s", layouts[t])
	}
	switch {
	case t == TypeDate && (dt.hasTime || dt.hasOff):
		return 0, bad("a date has no time of day")
	case t == TypeTimestamp && dt.hasOff:
		return 0, bad("a timestamp without time zone takes no offset")
	case t == TypeTimestampTZ && (!dt.hasTime || !dt.hasOff):
		return 0, bad("a timestamptz needs a time and an offset or Z")
	}
	days, err := dt.days()
	if err != nil {
		return 0, err
	}
	if t == TypeDate {
		if days < minDate || days >= endDate {
			return 0, bad("date out of range")
		}
		return days, nil
	}
	if days < minDate-1 || days > endTimestamp/usPerDay+1 {
		return 0, bad("timestamp out of range")
	}
	us := days*usPerDay + ((dt.hour*60+dt.min)*60+dt.sec-dt.off)*1000000 + dt.usec
	if us < minTimestamp || us >= endTimestamp {
		return 0, bad("timestamp out of range")
	}
	return us, nil
}

var layouts = [...]string{
	TypeDate:        "YYYY-MM-DD",
	TypeTimestamp:   "YYYY-MM-DDTHH:MM:SS[.ffffff]",
	TypeTimestampTZ: "YYYY-MM-DDTHH:MM:SS[.ffffff] and an offset (Z, +HH, +HH:MM)",
}

// days validates the date and time fields and returns the days since 2000-01-01 of
// the date, in the proleptic Gregorian calendar (1 BC is year 0, as Postgres counts).
func (dt datetime) days() (int64, error) {
	y := dt.year
	if y == 0 {
		return 0, bad("there is no year 0")
	}
	if dt.bc {
		y = 1 - y
	}
	if dt.month < 1 || dt.month > 12 || dt.day < 1 || dt.day > daysIn(y, dt.month) {
		return 0, bad("no such date")
	}
	// Postgres reads 24:00:00 as the next midnight and a leap second 60 as the next
	// minute's first, and nothing later.
	if dt.min > 59 || dt.sec > 60 || (dt.sec == 60 && dt.usec > 0) || dt.hour > 24 || (dt.hour == 24 && dt.min+dt.sec+dt.usec > 0) {
		return 0, bad("no such time")
	}
	if dt.off < -(16*3600-1) || dt.off > 16*3600-1 {
		return 0, bad("offset out of range")
	}
	// Howard Hinnant's days_from_civil, shifted from 1970 to 2000.
	m, d := dt.month, dt.day
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468 - 10957, nil
}

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// scanDatetime reads Y{4,7}-MM-DD, then optionally a time ([Tt ]HH:MM:SS[.f{1,6}]),
// an offset (Z, z, or ±HH[:MM[:SS]]) and " BC": the forms Postgres prints in JSON
// and in text, and RFC 3339.
func scanDatetime(s []byte) (datetime, bool) {
	var dt datetime
	var ok bool
	p := scanner{s: s}
	if dt.year, ok = p.num(4, 7); !ok || !p.lit('-') {
		return dt, false
	}
	if dt.month, ok = p.num(2, 2); !ok || !p.lit('-') {
		return dt, false
	}
	if dt.day, ok = p.num(2, 2); !ok {
		return dt, false
	}
	if p.more() && (p.peek() == 'T' || p.peek() == 't' || p.peek() == ' ') && p.digitAt(1) {
		p.i++
		dt.hasTime = true
		if !p.time(&dt.hour, &dt.min, &dt.sec) {
			return dt, false
		}
		if p.lit('.') {
			if dt.usec, ok = p.fraction(); !ok {
				return dt, false
			}
		}
	}
	if p.lit('Z') || p.lit('z') {
		dt.hasOff = true
	} else if p.more() && (p.peek() == '+' || p.peek() == '-') {
		dt.hasOff = true
		if dt.off, ok = p.offset(); !ok {
			return dt, false
		}
	}
	if p.more() && string(p.s[p.i:]) == " BC" {
		dt.bc = true
		p.i += 3
	}
	return dt, !p.more()
}

// scanner reads a datetime left to right.
type scanner struct {
	s []byte
	i int
}

func (p *scanner) more() bool { return p.i < len(p.s) }
func (p *scanner) peek() byte { return p.s[p.i] }

func (p *scanner) digitAt(k int) bool {
	return p.i+k < len(p.s) && p.s[p.i+k] >= '0' && p.s[p.i+k] <= '9'
}

func (p *scanner) lit(c byte) bool {
	if p.more() && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// num reads between lo and hi digits.
func (p *scanner) num(lo, hi int) (int64, bool) {
	var v int64
	n := 0
	for n < hi && p.digitAt(0) {
		v = v*10 + int64(p.s[p.i]-'0')
		p.i++
		n++
	}
	return v, n >= lo && !p.digitAt(0)
}

// time reads HH:MM:SS.
func (p *scanner) time(h, m, s *int64) bool {
	var ok bool
	if *h, ok = p.num(2, 2); !ok || !p.lit(':') {
		return false
	}
	if *m, ok = p.num(2, 2); !ok || !p.lit(':') {
		return false
	}
	*s, ok = p.num(2, 2)
	return ok
}

// fraction reads 1 to 6 digits after the point as microseconds.
func (p *scanner) fraction() (int64, bool) {
	start := p.i
	v, ok := p.num(1, 6)
	for n := p.i - start; n < 6; n++ {
		v *= 10
	}
	return v, ok
}

// offset reads ±HH[:MM[:SS]] as seconds east of UTC.
func (p *scanner) offset() (int64, bool) {
	neg := p.s[p.i] == '-'
	p.i++
	h, ok := p.num(2, 2)
	var m, s int64
	if ok && p.lit(':') {
		m, ok = p.num(2, 2)
		if ok && p.lit(':') {
			s, ok = p.num(2, 2)
		}
	}
	if !ok || m > 59 || s > 59 {
		return 0, false
	}
	off := (h*60+m)*60 + s
	if neg {
		off = -off
	}
	return off, true
}
