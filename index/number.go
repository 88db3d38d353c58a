package index

import "encoding/binary"

// maxExp bounds a number's decimal exponent: far beyond what numeric (10^131072) or
// float8 (10^±308) holds, and small enough that no arithmetic on it overflows.
const maxExp = 1 << 30

// decimal is a finite number as parsed: its digits before and after the point, and
// the exponent written after them.
type decimal struct {
	neg       bool
	int, frac []byte
	exp       int64
}

// appendNumberJSON appends a number rendered by to_json: a JSON number, or one of the
// strings "NaN", "Infinity" and "-Infinity" that to_json writes for the specials.
func appendNumberJSON(dst []byte, raw []byte) ([]byte, error) {
	if len(raw) > 0 && raw[0] == '"' {
		switch string(raw) {
		case `"NaN"`:
			return append(dst, tagNaN), nil
		case `"Infinity"`:
			return append(dst, tagPosInf), nil
		case `"-Infinity"`:
			return append(dst, tagNegInf), nil
		}
		return dst, bad("want a number")
	}
	d, ok := parseJSONNumber(raw)
	if !ok {
		return dst, bad("want a JSON number")
	}
	return appendDecimal(dst, d)
}

// appendNumberText appends a number as typed in a filter or printed by Postgres:
// an optional sign, digits with an optional point (".5" and "5." too), an optional
// exponent; or NaN, Infinity, inf, with a sign for the infinities, in any case.
func appendNumberText(dst []byte, s []byte) ([]byte, error) {
	switch string(lowerASCII(s)) {
	case "nan":
		return append(dst, tagNaN), nil
	case "infinity", "+infinity", "inf", "+inf":
		return append(dst, tagPosInf), nil
	case "-infinity", "-inf":
		return append(dst, tagNegInf), nil
	}
	var d decimal
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		d.neg = s[0] == '-'
		s = s[1:]
	}
	d.int, s = digits(s)
	if len(s) > 0 && s[0] == '.' {
		d.frac, s = digits(s[1:])
	}
	if len(d.int)+len(d.frac) == 0 {
		return dst, bad("want digits")
	}
	s, ok := parseExp(&d, s)
	if !ok || len(s) > 0 {
		return dst, bad("want a decimal number")
	}
	return appendDecimal(dst, d)
}

func lowerASCII(s []byte) []byte {
	if len(s) > 9 {
		return nil
	}
	var b [9]byte
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return b[:len(s)]
}

// parseJSONNumber parses the JSON grammar exactly:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func parseJSONNumber(s []byte) (decimal, bool) {
	var d decimal
	if len(s) > 0 && s[0] == '-' {
		d.neg = true
		s = s[1:]
	}
	d.int, s = digits(s)
	if len(d.int) == 0 || (len(d.int) > 1 && d.int[0] == '0') {
		return d, false
	}
	if len(s) > 0 && s[0] == '.' {
		d.frac, s = digits(s[1:])
		if len(d.frac) == 0 {
			return d, false
		}
	}
	s, ok := parseExp(&d, s)
	return d, ok && len(s) == 0
}

// parseExp parses an optional exponent into d.exp, returning what follows it.
func parseExp(d *decimal, s []byte) ([]byte, bool) {
	if len(s) == 0 || (s[0] != 'e' && s[0] != 'E') {
		return s, true
	}
	s = s[1:]
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	e, s := digits(s)
	if len(e) == 0 {
		return s, false
	}
	for _, c := range e {
		d.exp = d.exp*10 + int64(c-'0')
		if d.exp > maxExp {
			return s, false
		}
	}
	if neg {
		d.exp = -d.exp
	}
	return s, true
}

func digits(s []byte) (ds, rest []byte) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

// appendDecimal appends a finite number: zero is its tag alone; a positive number is
// its tag, its exponent E and its significant digits d1 d2 … dn (d1 and dn not 0) for
// the value 0.d1d2…dn × 10^E, in pairs, each pair v as the byte 2v+1 but the last as
// 2v, so that a number whose digits extend another's sorts after it; a negative
// number is its tag and the bytes of its absolute value complemented, which reverses
// their order (they are prefix-free).
func appendDecimal(dst []byte, d decimal) ([]byte, error) {
	n := len(d.int) + len(d.frac)
	at := func(i int) byte {
		if i < len(d.int) {
			return d.int[i] - '0'
		}
		return d.frac[i-len(d.int)] - '0'
	}
	lo, hi := 0, n-1
	for lo < n && at(lo) == 0 {
		lo++
	}
	if lo == n {
		return append(dst, tagZero), nil
	}
	for at(hi) == 0 {
		hi--
	}
	e := int64(len(d.int)-lo) + d.exp
	if e > maxExp || e < -maxExp {
		return dst, bad("exponent out of range")
	}
	if d.neg {
		dst = append(dst, tagNeg)
	} else {
		dst = append(dst, tagPos)
	}
	start := len(dst)
	dst = appendExp(dst, e)
	for i := lo; i <= hi; i += 2 {
		v := at(i) * 10
		if i+1 <= hi {
			v += at(i + 1)
		}
		if i+2 > hi {
			dst = append(dst, 2*v)
		} else {
			dst = append(dst, 2*v+1)
		}
	}
	if d.neg {
		for i := start; i < len(dst); i++ {
			dst[i] = ^dst[i]
		}
	}
	return dst, nil
}

// appendExp appends an exponent in an order-preserving, self-delimiting form: one
// byte 0x80+e for -64 <= e <= 63, else a marker below (0x20) or above (0xE0) those
// bytes and e as a 4-byte big-endian offset integer.
func appendExp(dst []byte, e int64) []byte {
	switch {
	case e >= -64 && e <= 63:
		return append(dst, byte(0x80+e))
	case e < 0:
		dst = append(dst, 0x20)
	default:
		dst = append(dst, 0xE0)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(int32(e))^0x80000000)
}
