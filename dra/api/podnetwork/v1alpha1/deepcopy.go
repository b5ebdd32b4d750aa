package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The deep copies are written by hand: the repository runs no
// deepcopy-gen, and the types are few. TestDeepCopy checks that a copy
// shares no memory with its original.

var (
	_ runtime.Object = (*PodNetwork)(nil)
	_ runtime.Object = (*PodNetworkList)(nil)
	_ runtime.Object = (*PodNetworkAttachment)(nil)
	_ runtime.Object = (*PodNetworkAttachmentList)(nil)
)

func copyRefs(in []ParametersRef) []ParametersRef {
	if in == nil {
		return nil
	}
	return append([]ParametersRef(nil), in...)
}

func copyConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// DeepCopyInto copies in into out.
func (in *PodNetworkSpec) DeepCopyInto(out *PodNetworkSpec) {
	*out = *in
	if in.Enabled != nil {
		out.Enabled = new(bool)
		*out.Enabled = *in.Enabled
	}
	out.ParametersRefs = copyRefs(in.ParametersRefs)
}

// DeepCopyInto copies in into out.
func (in *PodNetwork) DeepCopyInto(out *PodNetwork) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	out.Status.Conditions = copyConditions(in.Status.Conditions)
}

// DeepCopy returns a copy of in.
func (in *PodNetwork) DeepCopy() *PodNetwork {
	if in == nil {
		return nil
	}
	out := new(PodNetwork)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of in.
func (in *PodNetwork) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies in into out.
func (in *PodNetworkList) DeepCopyInto(out *PodNetworkList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]PodNetwork, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy of in.
func (in *PodNetworkList) DeepCopy() *PodNetworkList {
	if in == nil {
		return nil
	}
	out := new(PodNetworkList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of in.
func (in *PodNetworkList) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies in into out.
func (in *PodNetworkAttachment) DeepCopyInto(out *PodNetworkAttachment) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.ParametersRefs = copyRefs(in.Spec.ParametersRefs)
	out.Status.Conditions = copyConditions(in.Status.Conditions)
}

// DeepCopy returns a copy of in.
func (in *PodNetworkAttachment) DeepCopy() *PodNetworkAttachment {
	if in == nil {
		return nil
	}
	out := new(PodNetworkAttachment)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of in.
func (in *PodNetworkAttachment) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies in into out.
func (in *PodNetworkAttachmentList) DeepCopyInto(out *PodNetworkAttachmentList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]PodNetworkAttachment, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy of in.
func (in *PodNetworkAttachmentList) DeepCopy() *PodNetworkAttachmentList {
	if in == nil {
		return nil
	}
	out := new(PodNetworkAttachmentList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of in.
func (in *PodNetworkAttachmentList) DeepCopyObject() runtime.Object { return in.DeepCopy() }
