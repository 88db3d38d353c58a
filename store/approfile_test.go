package store

import (
	"strings"
	"testing"

	btapb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
)

// TestJudgeAppProfile: only single-cluster routing with transactional writes keeps the
// guarantees; every other routing policy is a problem that names the profile and the fix.
func TestJudgeAppProfile(t *testing.T) {
	single := func(tx bool) *btapb.AppProfile {
		return &btapb.AppProfile{RoutingPolicy: &btapb.AppProfile_SingleClusterRouting_{
			SingleClusterRouting: &btapb.AppProfile_SingleClusterRouting{ClusterId: "c1", AllowTransactionalWrites: tx}}}
	}
	multi := &btapb.AppProfile{RoutingPolicy: &btapb.AppProfile_MultiClusterRoutingUseAny_{
		MultiClusterRoutingUseAny: &btapb.AppProfile_MultiClusterRoutingUseAny{}}}
	boost := single(true)
	boost.Isolation = &btapb.AppProfile_DataBoostIsolationReadOnly_{
		DataBoostIsolationReadOnly: &btapb.AppProfile_DataBoostIsolationReadOnly{}}
	for _, tc := range []struct {
		name        string
		profile     *btapb.AppProfile
		wantRouting string
		wantProblem string // a substring; "" for no problem
	}{
		{"single cluster, transactional", single(true), "single-cluster c1", ""},
		{"single cluster, no transactions", single(false), "single-cluster c1, transactional writes off", "does not allow transactional writes"},
		{"multi-cluster", multi, "multi-cluster", "routes to several clusters"},
		{"data boost", boost, "data boost (read-only)", "Data Boost"},
		{"no policy", &btapb.AppProfile{}, "unknown", "no routing policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gotRouting, gotProblem := judgeAppProfile("p", tc.profile)
			if gotRouting != tc.wantRouting {
				t.Errorf("routing = %q; want %q", gotRouting, tc.wantRouting)
			}
			switch {
			case tc.wantProblem == "" && gotProblem != "":
				t.Errorf("problem = %q; want none", gotProblem)
			case tc.wantProblem != "" && (!strings.Contains(gotProblem, tc.wantProblem) ||
				!strings.Contains(gotProblem, `"p"`) || !strings.Contains(gotProblem, "single-cluster routing")):
				t.Errorf("problem = %q; want one containing %q, the profile's name and the fix", gotProblem, tc.wantProblem)
			}
		})
	}
}
