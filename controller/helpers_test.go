package controller

import (
	"testing"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// testApproved are the operator's approved configs of the tests.
func testApproved(t testing.TB) cnipolicy.ApprovedSet {
	t.Helper()
	set, err := cnipolicy.LoadApproved("../dra/api/v1alpha1/testdata/design-cniconfig.yaml", "../dra/cnipolicy/testdata/storage-net.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return set
}
