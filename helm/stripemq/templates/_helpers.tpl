{{/*
Names, labels, addresses and checks shared by every template.
*/}}

{{- define "stripemq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every resource: the release name, with the chart's name unless it has it. */}}
{{- define "stripemq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "stripemq.clusterName" -}}
{{- default (include "stripemq.fullname" .) .Values.clusterName -}}
{{- end -}}

{{- define "stripemq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every resource. */}}
{{- define "stripemq.standardLabels" -}}
app: {{ include "stripemq.name" . }}
chart: {{ include "stripemq.chart" . }}
release: {{ .Release.Name }}
heritage: {{ .Release.Service }}
cluster: {{ include "stripemq.clusterName" . }}
app.kubernetes.io/name: {{ include "stripemq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "stripemq.chart" . }}
{{- end -}}

{{/* Labels of pod templates: no chart or app version, so an upgrade of the chart alone
restarts no pod (a changed pod template would roll ZooKeeper and the bookies). */}}
{{- define "stripemq.templateLabels" -}}
app: {{ include "stripemq.name" . }}
release: {{ .Release.Name }}
cluster: {{ include "stripemq.clusterName" . }}
app.kubernetes.io/name: {{ include "stripemq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels: the chart, the release and (given as .component) the component. */}}
{{- define "stripemq.matchLabels" -}}
app: {{ include "stripemq.name" .root }}
release: {{ .root.Release.Name }}
component: {{ .component }}
{{- end -}}

{{/* A component's resource name: <fullname>-<component>. Call with (dict "root" $ "component" name). */}}
{{- define "stripemq.componentName" -}}
{{- printf "%s-%s" (include "stripemq.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The image of a component: (dict "image" .Values.images.broker "name" "broker"). */}}
{{- define "stripemq.image" -}}
{{- if not .image.repository -}}
{{- fail (printf "images.%s.repository is required" .name) -}}
{{- end -}}
{{- if not .image.tag -}}
{{- fail (printf "images.%s.tag is required: the image to run, e.g. %s:0.1 from `docker build -t stripemq:0.1 .`" .name .image.repository) -}}
{{- end -}}
image: "{{ .image.repository }}:{{ .image.tag }}"
imagePullPolicy: {{ .image.pullPolicy | default "IfNotPresent" }}
{{- end -}}

{{/* The DNS name of a pod of a StatefulSet: (dict "root" $ "pod" name "service" name). */}}
{{- define "stripemq.podFqdn" -}}
{{- printf "%s.%s.%s.svc.%s" .pod .service .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* ZooKeeper's connect string: the chart's pods, or pulsar_metadata.userProvidedZookeepers. */}}
{{- define "stripemq.zookeeper.connect" -}}
{{- if .Values.components.zookeeper -}}
{{- $service := include "stripemq.componentName" (dict "root" . "component" .Values.zookeeper.component) -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.zookeeper.replicaCount) -}}
{{- $pod := printf "%s-%d" $service $i -}}
{{- $hosts = append $hosts (printf "%s:%d" (include "stripemq.podFqdn" (dict "root" $ "pod" $pod "service" $service)) (int $.Values.zookeeper.ports.client)) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- else if .Values.pulsar_metadata.userProvidedZookeepers -}}
{{- .Values.pulsar_metadata.userProvidedZookeepers -}}
{{- else -}}
{{- fail "components.zookeeper is false: set pulsar_metadata.userProvidedZookeepers (host:2181,host:2181) to the ZooKeeper to use" -}}
{{- end -}}
{{- end -}}

{{/* The metadata store URL every role is given. */}}
{{- define "stripemq.metadataUrl" -}}
{{- $prefix := .Values.metadataPrefix | default "" -}}
{{- if and $prefix (not (hasPrefix "/" $prefix)) -}}
{{- fail (printf "metadataPrefix %q must start with /" $prefix) -}}
{{- end -}}
{{- printf "zk://%s%s" (include "stripemq.zookeeper.connect" .) $prefix -}}
{{- end -}}

{{/* The brokers' Service, as clients inside the cluster reach it. */}}
{{- define "stripemq.broker.service" -}}
{{- include "stripemq.componentName" (dict "root" . "component" .Values.broker.component) -}}
{{- end -}}

{{- define "stripemq.broker.headlessService" -}}
{{- printf "%s-headless" (include "stripemq.broker.service" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The brokers' Service by its full DNS name: it resolves from any namespace. */}}
{{- define "stripemq.broker.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "stripemq.broker.service" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "stripemq.broker.serviceUrl" -}}
{{- printf "pulsar://%s:%d" (include "stripemq.broker.serviceHost" .) (int .Values.broker.ports.pulsar) -}}
{{- end -}}

{{- define "stripemq.broker.webServiceUrl" -}}
{{- printf "http://%s:%d" (include "stripemq.broker.serviceHost" .) (int .Values.broker.ports.http) -}}
{{- end -}}

{{/*
A broker setting's value: from broker.configData by its stripemq or Pulsar name, else its
default. (dict "root" $ "name" "managed_ledger_default_ensemble_size").
*/}}
{{- define "stripemq.broker.setting" -}}
{{- $settings := index (.root.Files.Get "files/settings.json" | fromJson) "broker" -}}
{{- $variable := index $settings.env .name -}}
{{- $value := index $settings.defaults .name -}}
{{- range $key, $given := .root.Values.broker.configData -}}
{{- if eq (index $settings.env $key | default "") $variable -}}
{{- $value = $given -}}
{{- end -}}
{{- end -}}
{{- $value -}}
{{- end -}}

{{/*
A value as the text of an environment variable. Helm reads every number of a values file
as a float, which toString prints as 5.24288e+06: a whole number is printed as an integer.
*/}}
{{- define "stripemq.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- printf "%.0f" . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
The ConfigMap data of a role: the settings the chart manages, then configData, refused when
a key is no setting of the role or is one the chart sets (in the ConfigMap, "managed", or
in the pod's own env, named in "hints" with where to set it instead). "defaults" are the
chart's own defaults of some settings, which configData may override by either name.
(dict "root" $ "role" "broker" "values" "broker" "configData" .Values.broker.configData
      "managed" (dict "STRIPEMQ_X" "value" ...) "hints" (dict "STRIPEMQ_X" "where to set it"))
*/}}
{{- define "stripemq.configData" -}}
{{- $all := .root.Files.Get "files/settings.json" | fromJson -}}
{{- $settings := index $all .role | default dict -}}
{{- $env := $settings.env | default dict -}}
{{- range $variable, $value := .managed }}
{{ $variable }}: {{ include "stripemq.envValue" $value | quote }}
{{- end }}
{{- $given := dict -}}
{{- range $key, $value := .configData -}}
{{- $_ := set $given (index $env $key | default $key) true -}}
{{- end -}}
{{- range $variable, $value := .defaults | default dict }}
{{- if not (hasKey $given $variable) }}
{{ $variable }}: {{ include "stripemq.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- $seen := dict -}}
{{- range $key, $value := .configData }}
{{- $variable := index $env $key | default "" -}}
{{- if not $variable -}}
{{- fail (printf "%s.configData.%s: no %s setting has that name (`stripemq %s --print-config` lists them)" $.values $key $.role $.role) -}}
{{- end -}}
{{- if or (hasKey $.managed $variable) (hasKey $.hints $variable) -}}
{{- fail (printf "%s.configData.%s: the chart sets %s itself, from %s" $.values $key $variable (index $.hints $variable | default "its own values")) -}}
{{- end -}}
{{- if hasKey $seen $variable -}}
{{- fail (printf "%s.configData: %s and %s name the same setting" $.values $key (index $seen $variable)) -}}
{{- end -}}
{{- $_ := set $seen $variable $key }}
{{ $variable }}: {{ include "stripemq.envValue" $value | quote }}
{{- end -}}
{{- end -}}

{{/* Pod anti-affinity against the component's own pods: (dict "root" $ "values" .Values.bookkeeper). */}}
{{- define "stripemq.antiAffinity" -}}
{{- if and .root.Values.affinity.anti_affinity .values.affinity.anti_affinity }}
affinity:
  podAntiAffinity:
    {{- if eq .values.affinity.type "requiredDuringSchedulingIgnoredDuringExecution" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchLabels:
            {{- include "stripemq.matchLabels" (dict "root" .root "component" .values.component) | nindent 12 }}
        topologyKey: {{ .values.affinity.anti_affinity_topology_key }}
    {{- else if eq .values.affinity.type "preferredDuringSchedulingIgnoredDuringExecution" }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          labelSelector:
            matchLabels:
              {{- include "stripemq.matchLabels" (dict "root" .root "component" .values.component) | nindent 14 }}
          topologyKey: {{ .values.affinity.anti_affinity_topology_key }}
    {{- else }}
    {{- fail (printf "%s.affinity.type %q: requiredDuringSchedulingIgnoredDuringExecution or preferredDuringSchedulingIgnoredDuringExecution" .values.component .values.affinity.type) }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* nodeSelector and tolerations of a component's pods. */}}
{{- define "stripemq.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Prometheus annotations of a pod serving /metrics on port .port. */}}
{{- define "stripemq.scrapeAnnotations" -}}
prometheus.io/scrape: {{ .root.Values.prometheus.scrape | quote }}
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{/* The pod's own name, for its DNS name in STRIPEMQ_ADVERTISED_ADDRESS. */}}
{{- define "stripemq.podNameEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/*
The checks across values that values.schema.json cannot express. Included by every
template that depends on them, so a bad combination fails the render with one message.
*/}}
{{- define "stripemq.checks" -}}
{{- if .Values.components.zookeeper -}}
{{- $servers := int .Values.zookeeper.replicaCount -}}
{{- if eq (mod $servers 2) 0 -}}
{{- fail (printf "zookeeper.replicaCount %d: use an odd number (1, 3, 5): a quorum is a majority, so %d servers survive no more failures than %d" $servers $servers (sub $servers 1)) -}}
{{- end -}}
{{- $name := include "stripemq.componentName" (dict "root" . "component" .Values.zookeeper.component) -}}
{{- $existing := lookup "apps/v1" "StatefulSet" .Release.Namespace $name -}}
{{- if and $existing (ne (int $existing.spec.replicas) $servers) -}}
{{- fail (printf "zookeeper.replicaCount: the running ensemble has %d servers; changing it to %d rewrites every server's member list at once, which is not safe: keep %d" (int $existing.spec.replicas) $servers (int $existing.spec.replicas)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.components.broker -}}
{{- $ensemble := int (include "stripemq.broker.setting" (dict "root" . "name" "managed_ledger_default_ensemble_size")) -}}
{{- $write := int (include "stripemq.broker.setting" (dict "root" . "name" "managed_ledger_default_write_quorum")) -}}
{{- $ack := int (include "stripemq.broker.setting" (dict "root" . "name" "managed_ledger_default_ack_quorum")) -}}
{{- if or (lt $ack 1) (gt $ack $write) (gt $write $ensemble) -}}
{{- fail (printf "broker.configData: need 1 <= ack quorum (%d) <= write quorum (%d) <= ensemble size (%d)" $ack $write $ensemble) -}}
{{- end -}}
{{- if and .Values.components.bookkeeper (gt $ensemble (int .Values.bookkeeper.replicaCount)) -}}
{{- fail (printf "broker.configData: the ensemble size (%d) is larger than bookkeeper.replicaCount (%d): topics could never be written; add bookies or lower managed_ledger_default_ensemble_size" $ensemble (int .Values.bookkeeper.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
