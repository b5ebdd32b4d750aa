package watch

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// CNIConfigResource is the resource of approved configs (kind CNIConfig).
var CNIConfigResource = schema.GroupVersionResource{Group: v1alpha1.CNIGroup, Version: v1alpha1.CNIVersion, Resource: v1alpha1.CNIConfigResource}

// NewApprovedConfigs reads approved configs from the API server.
func NewApprovedConfigs(client dynamic.Interface) cnipolicy.ApprovedConfigs {
	return apiApproved{client}
}

type apiApproved struct{ client dynamic.Interface }

func (a apiApproved) Get(ctx context.Context, name string) (*v1alpha1.CNIConfigObject, error) {
	u, err := a.client.Resource(CNIConfigResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return cnipolicy.FromUnstructured(u)
}

// ConfigMaps reads ConfigMaps from the API server, for the arguments of a
// CNI config (cnipolicy.Sources). A nil client reads none.
type ConfigMaps struct{ Client kubernetes.Interface }

// ConfigMapData is the data of the ConfigMap namespace/name.
func (c ConfigMaps) ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error) {
	cm, err := c.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return cm.Data, nil
}
