package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// DecodeYAML decodes the Kubernetes objects of a multi-document YAML file.
func DecodeYAML(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objs = append(objs, obj)
	}
}

// ApplyDeviceClasses creates the DeviceClasses of a multi-document YAML
// file, replacing those that exist.
func (b *Bed) ApplyDeviceClasses(ctx context.Context, path string) error {
	objs, err := DecodeYAML(path)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		class, ok := obj.(*resourceapi.DeviceClass)
		if !ok {
			return fmt.Errorf("%s: %T is not a DeviceClass", path, obj)
		}
		classes := b.client.ResourceV1().DeviceClasses()
		_, err = classes.Create(ctx, class, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var old *resourceapi.DeviceClass
			if old, err = classes.Get(ctx, class.Name, metav1.GetOptions{}); err == nil {
				class.ResourceVersion = old.ResourceVersion
				_, err = classes.Update(ctx, class, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("apply DeviceClass %s: %w", class.Name, err)
		}
	}
	return nil
}
