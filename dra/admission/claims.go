package admission

import (
	"context"
	"k8s.io/apimachinery/pkg/labels"
	"net/netip"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/fastpath-dra/fastpath/dra/validate"
)

// Claims is a ClaimIndex of the cluster's ResourceClaims and
// DeviceClasses, from informers: each claim is kept with its spec and the
// names that identify it only (no status, labels, annotations or managed
// fields), indexed by the static addresses of its own fastpath.dev
// configs.
type Claims struct {
	factory informers.SharedInformerFactory
	claims  cache.SharedIndexInformer
	classes resourcelisters.DeviceClassLister
	synced  []cache.InformerSynced
}

var _ ClaimIndex = (*Claims)(nil)

// addressIndex is the informer's index of the claims by IndexAddresses.
const addressIndex = "fastpath.dev/static-address"

// NewClaims makes the informers; Run runs them. The client must be
// allowed to list and watch ResourceClaims and DeviceClasses.
func NewClaims(client kubernetes.Interface) (*Claims, error) {
	f := informers.NewSharedInformerFactory(client, 0)
	c := &Claims{factory: f, claims: f.Resource().V1().ResourceClaims().Informer()}
	classes := f.Resource().V1().DeviceClasses()
	c.classes = classes.Lister()
	if err := c.claims.SetTransform(trimClaim); err != nil {
		return nil, err
	}
	if err := c.claims.AddIndexers(cache.Indexers{addressIndex: func(obj any) ([]string, error) {
		claim, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return nil, nil
		}
		return IndexAddresses(claim), nil
	}}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{c.claims.HasSynced, classes.Informer().HasSynced}
	return c, nil
}

// trimClaim keeps of a claim what the index and its judgement read.
func trimClaim(obj any) (any, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return obj, nil
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion},
		Spec:       claim.Spec,
	}, nil
}

// Run runs the informers until ctx ends.
func (c *Claims) Run(ctx context.Context) {
	c.factory.Start(ctx.Done())
	<-ctx.Done()
	c.factory.Shutdown()
}

// Synced says whether the informers have listed every claim and class.
func (c *Claims) Synced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// WithAddress: see ClaimIndex.
func (c *Claims) WithAddress(class string, addr netip.Addr) []*resourceapi.ResourceClaim {
	objs, err := c.claims.GetIndexer().ByIndex(addressIndex, indexKey(class, addr))
	if err != nil {
		return nil
	}
	out := make([]*resourceapi.ResourceClaim, 0, len(objs))
	for _, o := range objs {
		if claim, ok := o.(*resourceapi.ResourceClaim); ok {
			out = append(out, claim)
		}
	}
	return out
}

// Class: see ClaimIndex.
func (c *Claims) Class(name string) *resourceapi.DeviceClass {
	dc, err := c.classes.Get(name)
	if err != nil {
		return nil
	}
	return dc
}

// Classes: see ClaimIndex.
func (c *Claims) Classes() map[string]*resourceapi.DeviceClass {
	list, err := c.classes.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make(map[string]*resourceapi.DeviceClass, len(list))
	for _, dc := range list {
		out[dc.Name] = dc
	}
	return out
}

// chartClasses are the chart's DeviceClasses, for a class the cluster's
// are not known to have.
var chartClasses = sync.OnceValue(validate.ChartDeviceClasses)
