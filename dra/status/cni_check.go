package status

import (
	"encoding/json"

	cni100 "github.com/containernetworking/cni/pkg/types/100"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// The condition CNI CHECK reports beside Ready (fastpathd
// --cni-check-interval), and its reasons.
const (
	ConditionHealthy = "Healthy"
	// ReasonCheckPassed: CHECK found the network as ADD left it.
	ReasonCheckPassed = "CNICheckPassed"
	// ReasonCheckFailed: CHECK failed; the message is its error.
	ReasonCheckFailed = "CNICheckFailed"
	// ReasonCheckNotSupported: the config's cniVersion (before 0.4.0) has
	// no CHECK.
	ReasonCheckNotSupported = "CNICheckNotSupported"
)

// NetworkChecked is the status of an added CNI network after a CHECK
// (checkErr its outcome, already free of secrets; supported false when the
// config's cniVersion has no CHECK): NetworkReady with the condition
// Healthy.
func NetworkChecked(n claims.Network, raw json.RawMessage, res *cni100.Result, supported bool, checkErr error) resourceapi.AllocatedDeviceStatus {
	st := NetworkReady(n, raw, res)
	c := metav1.Condition{Type: ConditionHealthy, Status: metav1.ConditionTrue, Reason: ReasonCheckPassed,
		Message: "CNI CHECK found the network as ADD left it.", LastTransitionTime: metav1.Now()}
	switch {
	case !supported:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonCheckNotSupported, "cniVersion "+cniVersionOf(n.Conflist)+" has no CHECK"
	case checkErr != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonCheckFailed, bounds.Message("CNI CHECK: "+checkErr.Error())
	}
	st.Conditions = append(st.Conditions, c)
	return st
}

func cniVersionOf(conflist []byte) string {
	var list struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(conflist, &list)
	return list.CNIVersion
}
