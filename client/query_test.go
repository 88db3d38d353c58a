package client

import (
	"testing"
	"time"
)

// Filter helpers write conditions as the API reads them; In quotes every value so
// that commas, parentheses and quotes inside one stay inside it.
func TestFilterHelpersWriteTheAPIsGrammar(t *testing.T) {
	at := time.Date(2005, 6, 1, 12, 30, 0, 500, time.FixedZone("", 5*3600))
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Eq("customer_id", 42), "customer_id=eq.42"},
		{Gte("amount", 1.10), "amount=gte.1.1"},
		{Lt("rental_date", at), "rental_date=lt.2005-06-01T12:30:00.0000005+05:00"},
		{Gt("active", true), "active=gt.true"},
		{Lte("name", "a,b"), "name=lte.a,b"},
		{IsNull("return_date"), "return_date=is.null"},
		{In("rating", "G", `PG "13"`, "a,(b)", `c\d`), `rating=in.("G","PG \"13\"","a,(b)","c\\d")`},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("filter = %s; want %s", got, tc.want)
		}
	}
	for _, fs := range [][]Filter{{Eq("limit", 1)}, {Eq("", 1)}, {Eq("a", 1), IsNull("select")}} {
		if err := checkFilters(fs); err == nil {
			t.Errorf("checkFilters(%v) = nil; want an error", fs)
		}
	}
}
