package index_test

import (
	"bytes"
	"fmt"
	"net/url"

	"github.com/snapflip/snapflip/index"
)

// A filter from a query string, planned against a collection's indexes, and the
// documents whose keys fall in the scan's ranges.
func ExamplePlan() {
	defs := []index.Def{
		index.NewDef([]string{"customer_id"}, []index.Type{index.TypeNumber}),
		index.NewDef([]string{"inventory_id", "rental_date"}, []index.Type{index.TypeNumber, index.TypeTimestampTZ}),
	}
	query, _ := url.ParseQuery(`inventory_id=in.(7,3)&rental_date=gte.2022-05-01T00:00:00Z`)
	var conds []index.Cond
	for field, exprs := range query {
		for _, expr := range exprs {
			c, err := index.ParseCond(field, expr)
			if err != nil {
				fmt.Println(err)
				return
			}
			conds = append(conds, c)
		}
	}
	scan, err := index.Plan(defs, conds)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("index %s, %d ranges\n", scan.Index.Name, len(scan.Ranges))
	for _, doc := range []string{
		`{"rental_id":1,"inventory_id":3,"rental_date":"2022-05-01T01:00:00+02:00"}`,
		`{"rental_id":2,"inventory_id":3.0,"rental_date":"2022-05-01T02:00:00+00:00"}`,
		`{"rental_id":3,"inventory_id":7,"rental_date":null}`,
		`{"rental_id":4,"inventory_id":7,"rental_date":"infinity"}`,
	} {
		key, _ := index.Key(scan.Index, []byte(doc))
		fmt.Println(doc[:14], matches(key, scan.Ranges))
	}
	// Output:
	// index inventory_id,rental_date, 2 ranges
	// {"rental_id":1 false
	// {"rental_id":2 true
	// {"rental_id":3 false
	// {"rental_id":4 true
}

func matches(key []byte, ranges []index.Range) bool {
	for _, r := range ranges {
		if bytes.Compare(r.Start, key) <= 0 && (r.End == nil || bytes.Compare(key, r.End) < 0) {
			return true
		}
	}
	return false
}
