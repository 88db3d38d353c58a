package index_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/internal/testenv"
)

// connect opens a fresh test database, with the settings whose renderings the
// package reads: ISO dates, and float output at the shortest exact precision.
func connect(tb testing.TB) (*pgx.Conn, context.Context) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, testenv.Postgres(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 1"); err != nil {
		tb.Fatal(err)
	}
	return conn, ctx
}

// oracleCase is a column type and values to store in it, as Postgres input text.
type oracleCase struct {
	sqlType string
	typ     index.Type
	values  []string
	zones   []string // TimeZone settings to read the values under
}

// TestEncodeOrderMatchesPostgres stores many values of each type, reads them back as
// to_json and as text ordered by Postgres (COLLATE "C" for text, NULLS LAST) with
// each row's rank, and checks that Encode orders them the same way, encodes equal
// exactly the values Postgres says are equal, and that EncodeText of the text
// rendering equals Encode of the JSON one.
func TestEncodeOrderMatchesPostgres(t *testing.T) {
	conn, ctx := connect(t)
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	utc := []string{"UTC"}
	cases := []oracleCase{
		{"numeric", index.TypeNumber, numerics(rng, 1500), utc},
		{"float8", index.TypeNumber, floats(rng, 1000, 64), utc},
		{"float4", index.TypeNumber, floats(rng, 500, 32), utc},
		{"int8", index.TypeNumber, ints(rng, 300), utc},
		{"text", index.TypeText, texts(rng, 1000), utc},
		{"varchar", index.TypeText, texts(rng, 200), utc},
		{"bool", index.TypeBool, []string{"true", "false", "t", "f"}, utc},
		{"date", index.TypeDate, datetimes(rng, 800, "date"), utc},
		{"timestamp", index.TypeTimestamp, datetimes(rng, 800, "timestamp"), utc},
		{"timestamptz", index.TypeTimestampTZ, datetimes(rng, 800, "timestamptz"),
			[]string{"UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Amsterdam", "Pacific/Chatham", "America/Los_Angeles"}},
	}
	for _, c := range cases {
		t.Run(c.sqlType, func(t *testing.T) {
			table := "o_" + c.sqlType
			mustExec(t, ctx, conn, fmt.Sprintf("CREATE TABLE %s (v %s)", table, c.sqlType))
			mustExec(t, ctx, conn, fmt.Sprintf("INSERT INTO %s SELECT unnest($1::text[])::%s", table, c.sqlType), c.values)
			mustExec(t, ctx, conn, fmt.Sprintf("INSERT INTO %s VALUES (NULL), (NULL)", table))
			for _, zone := range c.zones {
				mustExec(t, ctx, conn, "SET TimeZone = '"+zone+"'")
				checkOrder(t, ctx, conn, c, table, zone)
			}
		})
	}
}

func checkOrder(t *testing.T, ctx context.Context, conn *pgx.Conn, c oracleCase, table, zone string) {
	t.Helper()
	order := table + ".v"
	if c.typ == index.TypeText {
		order += ` COLLATE "C"`
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT coalesce(to_json(v)::text, 'null'), v::text,
		dense_rank() OVER (ORDER BY %[1]s NULLS LAST) FROM %[2]s ORDER BY 3`, order, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prevJSON string
	var prevEnc []byte
	var prevRank int64
	n, errs := 0, 0
	for rows.Next() {
		var js string
		var text *string
		var rank int64
		if err := rows.Scan(&js, &text, &rank); err != nil {
			t.Fatal(err)
		}
		n++
		enc, err := index.Encode(c.typ, []byte(js))
		if err != nil {
			t.Fatalf("%s: Encode(%s): %v", zone, js, err)
		}
		if text != nil {
			if got, err := index.EncodeText(c.typ, *text); err != nil || !bytes.Equal(got, enc) {
				t.Errorf("%s: EncodeText(%q) = %x, %v; want %x, Encode of %s", zone, *text, got, err, enc, js)
				errs++
			}
		}
		if prevEnc != nil {
			cmp := bytes.Compare(prevEnc, enc)
			if (rank == prevRank) != (cmp == 0) || cmp > 0 {
				t.Errorf("%s: Postgres ranks %s %d and %s %d; encodings %x and %x compare %d",
					zone, prevJSON, prevRank, js, rank, prevEnc, enc, cmp)
				errs++
			}
		}
		if errs > 20 {
			t.Fatal("too many errors")
		}
		prevJSON, prevEnc, prevRank = js, enc, rank
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := len(c.values) + 2; n != want {
		t.Fatalf("read %d rows; want %d", n, want)
	}
}

func mustExec(tb testing.TB, ctx context.Context, conn *pgx.Conn, sql string, args ...any) {
	tb.Helper()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

func numerics(rng *rand.Rand, n int) []string {
	vs := []string{"0", "-0", "0.000", "1.1", "1.10", "-1.1", "-1.10", "12.50", "12.5", "1e-300", "-1e-300",
		"1e+300", "NaN", "Infinity", "-Infinity", "12345678901234567890123456789012345678",
		"-12345678901234567890123456789012345678", "0.00000000000000000000000000000000000001",
		"99999999999999999999999999999999999999", "100000000000000000000000000000000000000",
		"1e131071", "-1e131071", "1e-16383", "0.5", "5", "50", "500", "0.05", "1", "10", "100", "-1", "-10"}
	for len(vs) < n {
		vs = append(vs, randomNumeric(rng))
	}
	return vs
}

func randomNumeric(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(2) == 0 {
		b.WriteByte('-')
	}
	b.WriteString(randomDigits(rng, 1+rng.IntN(20)))
	if rng.IntN(2) == 0 {
		b.WriteByte('.')
		b.WriteString(randomDigits(rng, 1+rng.IntN(20)))
	}
	if rng.IntN(4) == 0 {
		fmt.Fprintf(&b, "e%d", rng.IntN(400)-200)
	}
	return b.String()
}

// randomDigits returns n digits, often with runs of zeros and nines, which are the
// digits where encodings are subtle.
func randomDigits(rng *rand.Rand, n int) string {
	const alphabets = "0123456789"
	b := make([]byte, n)
	for i := range b {
		switch rng.IntN(4) {
		case 0:
			b[i] = '0'
		case 1:
			b[i] = '9'
		default:
			b[i] = alphabets[rng.IntN(10)]
		}
	}
	return string(b)
}

func floats(rng *rand.Rand, n, bits int) []string {
	vs := []string{"0", "-0", "NaN", "Infinity", "-Infinity", "0.1", "0.30000000000000004", "1e-300", "5e-324",
		"1.7976931348623157e308", "-1.7976931348623157e308", "1", "-1", "1.5", "100", "1e+21", "1e21", "123456789012345680000"}
	if bits == 32 {
		vs = []string{"0", "-0", "NaN", "Infinity", "-Infinity", "0.1", "1e-45", "3.4028235e38", "1", "-1", "16777217"}
	}
	for len(vs) < n {
		var f float64
		switch rng.IntN(3) {
		case 0:
			f = math.Float64frombits(rng.Uint64())
		case 1:
			f = rng.NormFloat64() * 1000
		default:
			f = float64(rng.IntN(200)-100) / 8
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		if bits == 32 {
			if f32 := float32(f); !math.IsInf(float64(f32), 0) {
				vs = append(vs, strconv.FormatFloat(float64(f32), 'g', -1, 32))
			}
			continue
		}
		vs = append(vs, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return vs
}

func ints(rng *rand.Rand, n int) []string {
	vs := []string{"0", "-1", "1", strconv.Itoa(math.MaxInt64), strconv.Itoa(math.MinInt64)}
	for len(vs) < n {
		vs = append(vs, strconv.FormatInt(int64(rng.Uint64())>>rng.IntN(64), 10))
	}
	return vs
}

func texts(rng *rand.Rand, n int) []string {
	vs := []string{"", " ", "a", "A", "ab", "a b", "é", "e\u0301", "€", "😀", "\uffff", "\U0010ffff", "\u007f",
		"\x01", "\x1f", "\t", "\n", "\r", "\"", "\\", "\\u0000", "/", "null", "true", "1", "ß", "日本語"}
	alphabet := []rune{'a', 'b', 'A', ' ', '"', '\\', '/', '\n', '\t', '\x01', '\x1f', '\u007f', 'é', '€', '😀', '\uffff', 'z', '~'}
	for len(vs) < n {
		r := make([]rune, rng.IntN(8))
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		vs = append(vs, string(r))
	}
	return vs
}

// datetimes returns values of sqlType (date, timestamp or timestamptz) as Postgres
// input: edge cases, then random dates from 4713 BC to 200000 AD with random times,
// fractions and offsets.
func datetimes(rng *rand.Rand, n int, sqlType string) []string {
	vs := []string{"infinity", "-infinity", "2000-01-01", "1999-12-31", "2000-02-29", "1970-01-01",
		"0001-01-01", "0001-12-31 BC", "0044-03-15 BC", "4713-01-01 BC", "9999-12-31", "10000-01-01"}
	if sqlType != "date" {
		vs = append(vs, "2000-01-01 00:00:00.000001", "1999-12-31 23:59:59.999999", "2000-01-01 00:00:00.1",
			"2000-01-01 00:00:00.10", "294276-12-31 12:00:00", "4713-01-01 00:00:00 BC", "1900-06-01 12:00:00")
	}
	for len(vs) < n {
		y := 1 + rng.IntN(2100)
		switch rng.IntN(8) {
		case 0:
			y = 1 + rng.IntN(4700)
		case 1:
			y = 10000 + rng.IntN(190000)
		}
		s := fmt.Sprintf("%04d-%02d-%02d", y, 1+rng.IntN(12), 1+rng.IntN(28))
		if sqlType != "date" {
			s += fmt.Sprintf(" %02d:%02d:%02d", rng.IntN(24), rng.IntN(60), rng.IntN(60))
			if rng.IntN(2) == 0 {
				s += "." + randomDigits(rng, 1+rng.IntN(6))
			}
		}
		if sqlType == "timestamptz" && rng.IntN(2) == 0 {
			s += fmt.Sprintf("%+03d:%02d", rng.IntN(27)-13, []int{0, 30, 45}[rng.IntN(3)])
		}
		if rng.IntN(6) == 0 && y <= 4713 {
			s += " BC"
		}
		vs = append(vs, s)
	}
	return vs
}
