{{/* The chart's name, or nameOverride. */}}
{{- define "fastpath.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of the release's objects: fullnameOverride, or the release
name with the chart's name unless the release name already holds it. */}}
{{- define "fastpath.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fastpath.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fastpath.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fastpath.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fastpath.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fastpath
{{- end }}

{{- define "fastpath.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fastpath.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository:tag, or repository@digest. */}}
{{- define "fastpath.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The DRA drivers this release serves. */}}
{{- define "fastpath.drivers" -}}
- fastpath.dev
{{- if .Values.cni.enabled }}
- cni.dra.networking.x-k8s.io
{{- end }}
{{- end }}

{{/* The namespace of the approved CNI configs. */}}
{{- define "fastpath.cniConfigNamespace" -}}
{{- default .Release.Namespace .Values.cni.configNamespace }}
{{- end }}

{{/* The address of /healthz, /readyz and /metrics. */}}
{{- define "fastpath.metricsAddr" -}}
{{- printf "%s:%d" .Values.metrics.host (int .Values.metrics.port) }}
{{- end }}

{{/* An HTTP GET of path on the metrics port, for a probe. */}}
{{- define "fastpath.probe" -}}
exec:
  command: [/fastpathd, probe, --socket, /run/fastpath-probe/health.sock, {{ . }}]
{{- end }}

{{/*
The CEL condition of a DeviceClass selector that leaves out PFs with VFs
(attribute sriovNumVFs above 0), at the indentation of the selectors.
*/}}
{{- define "fastpath.withoutVFs" -}}
(!("sriovNumVFs" in device.attributes["fastpath.dev"]) ||
         device.attributes["fastpath.dev"].sriovNumVFs == 0)
{{- end }}

{{/* The arguments of fastpathd, as a YAML list. */}}
{{- define "fastpath.args" -}}
{{- $v := .Values }}
{{- $plugins := printf "%s/plugins" (trimSuffix "/" $v.kubeletRootDir) }}
{{- $args := list "run"
  (printf "--plugin-dir=%s/fastpath.dev" $plugins)
  (printf "--registry-dir=%s/plugins_registry" (trimSuffix "/" $v.kubeletRootDir))
  (printf "--nri-socket=%s" $v.nriSocket)
  (printf "--state-dir=%s" $v.stateDir)
  (printf "--cdi-dir=%s" $v.cdiDir)
  (printf "--bpf-dir=%s" $v.bpfDir)
  (printf "--metrics-addr=%s" (ternary (include "fastpath.metricsAddr" .) "" $v.metrics.enabled))
  "--health-socket=/run/fastpath-probe/health.sock"
  (printf "-v=%d" (int $v.logging.verbosity)) }}
{{- with $v.logging.format }}{{ $args = append $args (printf "--logging-format=%s" .) }}{{ end }}
{{- with $v.filter }}{{ $args = append $args (printf "--filter=%s" .) }}{{ end }}
{{- with $v.share.filter }}{{ $args = append $args (printf "--share=%s" .) }}{{ end }}
{{- with $v.share.interfaces }}{{ $args = append $args (printf "--share-interfaces=%d" (int .)) }}{{ end }}
{{- range $v.resourceNames }}{{ $args = append $args (printf "--resource-name=%s=%s" .name .filter) }}{{ end }}
{{- with $v.share.bandwidthMbps }}{{ $args = append $args (printf "--share-bandwidth-mbps=%d" (int .)) }}{{ end }}
{{- if ne (toString $v.nriPluginIndex) "10" }}{{ $args = append $args (printf "--nri-plugin-index=%s" (toString $v.nriPluginIndex)) }}{{ end }}
{{- if $v.nodeConfig.enabled }}{{ $args = append $args "--node-config" }}{{ end }}
{{- if not $v.deviceMetadata }}{{ $args = append $args "--device-metadata=false" }}{{ end }}
{{- if not $v.claimPrefetch }}{{ $args = append $args "--claim-prefetch=false" }}{{ end }}
{{- if not $v.attachOverlap }}{{ $args = append $args "--attach-overlap=false" }}{{ end }}
{{- if $v.allowPFWithVFs }}{{ $args = append $args "--allow-pf-with-vfs" }}{{ end }}
{{- if eq (toString $v.pfCounters) "auto" }}
{{- if semverCompare ">=1.36-0" .Capabilities.KubeVersion.Version }}{{ $args = append $args "--pf-counters" }}{{ end }}
{{- else if $v.pfCounters }}{{ $args = append $args "--pf-counters" }}{{ end }}
{{- if $v.numaNodeList }}{{ $args = append $args "--numa-node-list" }}{{ end }}
{{- with $v.bindingConditions.selector }}{{ $args = append $args (printf "--binding-conditions=%s" .) }}{{ end }}
{{- with $v.bindingConditions.timeout }}{{ $args = append $args (printf "--binding-timeout=%s" .) }}{{ end }}
{{- with $v.interfaceSysctls }}{{ $args = append $args (printf "--interface-sysctls=%s" (join "," .)) }}{{ end }}
{{- if not $v.checkpointJournal }}{{ $args = append $args "--checkpoint-journal=false" }}{{ end }}
{{- if $v.ipPools }}{{ $args = append $args "--ip-pools=/etc/fastpath/ip-pools/pools.yaml" }}{{ end }}
{{- with $v.rediscoverInterval }}{{ $args = append $args (printf "--rediscover-interval=%s" .) }}{{ end }}
{{- with $v.health.grace }}{{ $args = append $args (printf "--health-grace=%s" .) }}{{ end }}
{{- with $v.health.degradedHold }}{{ $args = append $args (printf "--health-degraded-hold=%s" .) }}{{ end }}
{{- if $v.health.evict }}{{ $args = append $args "--health-evict" }}{{ end }}
{{- with $v.memif.dir }}{{ $args = append $args (printf "--memif-dir=%s" .) }}{{ end }}
{{- if $v.memif.endpoints }}{{ $args = append $args "--memif-config=/etc/fastpath/memif/config.yaml" }}{{ end }}
{{- if $v.cni.enabled }}
{{- $args = append $args "--cni" }}
{{- $args = append $args (printf "--cni-plugin-dir=%s/cni.dra.networking.x-k8s.io" $plugins) }}
{{- $args = append $args (printf "--cni-bin-dir=%s" (join "," $v.cni.binDirs)) }}
{{- $args = concat $args (include "fastpath.cniPolicyArgs" . | fromYamlArray) }}
{{- with $v.cni.checkInterval }}{{ $args = append $args (printf "--cni-check-interval=%s" .) }}{{ end }}
{{- with $v.cni.devices }}{{ $args = append $args (printf "--cni-devices=%d" (int .)) }}{{ end }}
{{- if $v.cni.sharedDevice }}{{ $args = append $args "--cni-shared-device" }}{{ end }}
{{- with $v.cni.interface }}{{ $args = append $args (printf "--cni-interface=%s" .) }}{{ end }}
{{- end }}
{{- if $v.npwg.enabled }}
{{- $args = append $args "--npwg" }}
{{- if not $v.cni.enabled }}
{{- $args = append $args (printf "--cni-bin-dir=%s" (join "," $v.cni.binDirs)) }}
{{- with $v.cni.plugins }}{{ $args = append $args (printf "--cni-plugins=%s" (join "," .)) }}{{ end }}
{{- end }}
{{- $args = append $args (printf "--npwg-conf-dir=%s" $v.npwg.confDir) }}
{{- with $v.npwg.confNamespaces }}{{ $args = append $args (printf "--npwg-conf-namespaces=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.allowedNamespaces }}{{ $args = append $args (printf "--npwg-allowed-namespaces=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.hostDevices }}{{ $args = append $args (printf "--npwg-host-devices=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.hostPaths }}{{ $args = append $args (printf "--npwg-host-paths=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.hostOptions }}{{ $args = append $args (printf "--npwg-host-options=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.vlanIDs }}{{ $args = append $args (printf "--npwg-vlan-ids=%s" (join "," .)) }}{{ end }}
{{- if ne $v.npwg.defaultNetwork "default/cluster-network" }}{{ $args = append $args (printf "--npwg-default-network=%s" $v.npwg.defaultNetwork) }}{{ end }}
{{- $args = append $args (printf "--npwg-device-info-dir=%s" $v.npwg.deviceInfoDir) }}
{{- $args = append $args (printf "--npwg-max-networks=%v" $v.npwg.maxNetworks) }}
{{- $args = append $args (printf "--npwg-max-interfaces=%v" $v.npwg.maxInterfaces) }}
{{- if $v.podNetworks.enabled }}{{ $args = append $args "--podnetworks" }}{{ end }}
{{- if $v.npwg.ipamClaims.enabled }}
{{- $args = append $args "--npwg-ipamclaims" }}
{{- with $v.npwg.ipamClaims.checkInterval }}{{ $args = append $args (printf "--npwg-ipamclaim-check-interval=%s" .) }}{{ end }}
{{- end }}
{{- end }}
{{- if $v.networkAPI.enabled }}
{{- if not (or $v.cni.enabled $v.npwg.enabled) }}
{{- $args = append $args (printf "--cni-bin-dir=%s" (join "," $v.cni.binDirs)) }}
{{- end }}
{{- $args = append $args (printf "--network-api-socket=%s/network-api.sock" (trimSuffix "/" $v.networkAPI.socketDir)) }}
{{- $args = append $args (printf "--network-api-cni-conf-dir=%s" $v.networkAPI.cniConfDir) }}
{{- end }}
{{- if or $v.cni.enabled $v.npwg.enabled $v.networkAPI.enabled }}
{{- $args = append $args (printf "--cni-max-plugins=%d" (int $v.cni.maxPlugins)) }}
{{- end }}
{{- range $v.extraArgs }}{{ $args = append $args (toString .) }}{{ end }}
{{- toYaml $args }}
{{- end }}

{{/* The controller's name and labels: not the DaemonSet's selector's. */}}
{{- define "fastpath.controllerName" -}}
{{- printf "%s-controller" (include "fastpath.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fastpath.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "fastpath.name" . }}-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The controller runs with the CNI driver (it writes the status of CNIConfig objects), PodNetworks, the webhook or IPAMClaims. */}}
{{- define "fastpath.controllerEnabled" -}}
{{- if and .Values.controller.enabled (or .Values.cni.enabled .Values.podNetworks.enabled .Values.webhook.enabled (and .Values.npwg.enabled .Values.npwg.ipamClaims.enabled)) }}true{{ end }}
{{- end }}

{{/* The webhook's Service and ValidatingWebhookConfiguration; its Secret is this name with -certs. */}}
{{- define "fastpath.webhookName" -}}
{{- printf "%s-webhook" (include "fastpath.fullname" .) | trunc 55 | trimSuffix "-" }}
{{- end }}

{{/* How the API server reaches the webhook: webhook.url, or the Service. */}}
{{- define "fastpath.webhookClientConfig" -}}
{{- if .Values.webhook.url }}
url: {{ .Values.webhook.url | quote }}
{{- else }}
service: {name: {{ include "fastpath.webhookName" . }}, namespace: {{ .Release.Namespace }}, path: /validate, port: 443}
{{- end }}
{{- end }}

{{/* The client config of the scheduling gates' mutating webhook: the validating one's, at path /gate. */}}
{{- define "fastpath.gateClientConfig" -}}
{{- if .Values.webhook.url }}
{{- $u := urlParse .Values.webhook.url }}
url: {{ printf "%s://%s/gate" $u.scheme $u.host | quote }}
{{- else }}
service: {name: {{ include "fastpath.webhookName" . }}, namespace: {{ .Release.Namespace }}, path: /gate, port: 443}
{{- end }}
{{- end }}

{{/* Whether pods listing PodNetworks are gated until their networks can be attached. */}}
{{- define "fastpath.schedulingGates" -}}
{{- if and .Values.webhook.enabled .Values.webhook.schedulingGates .Values.podNetworks.enabled (include "fastpath.controllerEnabled" .) }}true{{ end }}
{{- end }}

{{/* The rules of a NetworkAttachmentDefinition for the controller's webhook: the values the daemon's flags of the same names take. */}}
{{- define "fastpath.npwgRuleArgs" -}}
{{- $v := .Values }}
{{- $args := list }}
{{- with $v.npwg.confNamespaces }}{{ $args = append $args (printf "--npwg-conf-namespaces=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.hostDevices }}{{ $args = append $args (printf "--npwg-host-devices=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.hostPaths }}{{ $args = append $args (printf "--npwg-host-paths=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.hostOptions }}{{ $args = append $args (printf "--npwg-host-options=%s" (join "," .)) }}{{ end }}
{{- with $v.npwg.vlanIDs }}{{ $args = append $args (printf "--npwg-vlan-ids=%s" (join "," .)) }}{{ end }}
{{- toYaml $args }}
{{- end }}

{{/* The policy flags of the CNI driver, shared by fastpathd run and controller. */}}
{{- define "fastpath.cniPolicyArgs" -}}
{{- $v := .Values }}
{{- $args := list (printf "--cni-config-namespace=%s" (include "fastpath.cniConfigNamespace" .)) }}
{{- with $v.cni.plugins }}{{ $args = append $args (printf "--cni-plugins=%s" (join "," .)) }}{{ end }}
{{- if $v.cni.requireApproved }}{{ $args = append $args "--cni-require-approved" }}{{ end }}
{{- with $v.cni.vlanIDs }}{{ $args = append $args (printf "--cni-vlan-ids=%s" (join "," .)) }}{{ end }}
{{- toYaml $args }}
{{- end }}

{{/* CNI plugins run on the node: for CNI claims or for the networks pods select (npwg). */}}
{{- define "fastpath.runsCNI" -}}
{{- if or .Values.cni.enabled .Values.npwg.enabled .Values.networkAPI.enabled }}true{{ end }}
{{- end }}

{{/* The schema of parametersRefs of PodNetwork and PodNetworkAttachment: the KEP's ParametersRef. */}}
{{- define "fastpath.parametersRefsSchema" -}}
description: >-
  The vendor or implementation specific parameters objects. fastpath judges
  refs to CNIConfig (cni.networking.x-k8s.io) and NetworkAttachmentDefinition
  (k8s.cni.cncf.io) objects; the owners of other kinds write ParamsReady.
type: array
maxItems: 16
items:
  type: object
  required: [group, kind, name]
  properties:
    group:
      description: The API group of the object, e.g. k8s.cni.cncf.io.
      type: string
      maxLength: 253
    kind:
      description: The kind (or resource) of the object, e.g. network-attachment-definitions.
      type: string
      minLength: 1
      maxLength: 63
    name:
      description: The object's name.
      type: string
      minLength: 1
      maxLength: 253
    namespace:
      description: The object's namespace, for a namespaced kind.
      type: string
      maxLength: 63
{{- end }}

{{/* The schema of the status of PodNetwork and PodNetworkAttachment. */}}
{{- define "fastpath.podNetworkConditionsSchema" -}}
type: object
properties:
  conditions:
    description: Ready and ParamsReady.
    type: array
    maxItems: 5
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [type]
    items:
      type: object
      required: [type, status, lastTransitionTime, reason, message]
      properties:
        type: {type: string, maxLength: 316}
        status: {type: string, enum: ["True", "False", "Unknown"]}
        observedGeneration: {type: integer, format: int64, minimum: 0}
        lastTransitionTime: {type: string, format: date-time}
        reason: {type: string, maxLength: 1024}
        message: {type: string, maxLength: 32768}
{{- end }}

{{/*
The extendedResourceName line of DeviceClass <short>.fastpath.dev, from
deviceClasses.extendedResourceNames.<short>; nothing when unset.
*/}}
{{- define "fastpath.extendedResourceName" -}}
{{- $root := index . 0 }}
{{- with index ($root.Values.deviceClasses.extendedResourceNames | default dict) (index . 1) }}
  extendedResourceName: {{ . }}
{{- end }}
{{- end }}
