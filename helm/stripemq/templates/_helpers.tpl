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

{{- define "stripemq.broker.serviceUrlTls" -}}
{{- printf "pulsar+ssl://%s:%d" (include "stripemq.broker.serviceHost" .) (int .Values.broker.ports.pulsarssl) -}}
{{- end -}}

{{- define "stripemq.broker.webServiceUrlTls" -}}
{{- printf "https://%s:%d" (include "stripemq.broker.serviceHost" .) (int .Values.broker.ports.https) -}}
{{- end -}}

{{/* The ports of both broker Services: the plain ones, and the TLS ones when the brokers serve TLS. */}}
{{- define "stripemq.broker.servicePorts" }}
- name: http
  port: {{ .Values.broker.ports.http }}
  targetPort: http
- name: pulsar
  port: {{ .Values.broker.ports.pulsar }}
  targetPort: pulsar
{{- if include "stripemq.tls.broker" . }}
- name: pulsarssl
  port: {{ .Values.broker.ports.pulsarssl }}
  targetPort: pulsarssl
- name: https
  port: {{ .Values.broker.ports.https }}
  targetPort: https
{{- end }}
{{- end -}}

{{/*
Security (tls.*, auth.*): the Secrets the pods mount, where, and the files the settings
name. The Secrets are made beforehand; their default names are the Pulsar chart's.
*/}}

{{/* "true" when the brokers serve TLS (tls.enabled and tls.broker.enabled, as in the
Pulsar chart), else "". */}}
{{- define "stripemq.tls.broker" -}}
{{- if and .Values.tls.enabled .Values.tls.broker.enabled -}}
true
{{- end -}}
{{- end -}}

{{- define "stripemq.tls.certSecret" -}}
{{- .Values.tls.broker.certSecret | default (printf "%s-tls-broker" .Release.Name) -}}
{{- end -}}

{{- define "stripemq.tls.caSecret" -}}
{{- .Values.tls.caSecret | default (include "stripemq.tls.certSecret" .) -}}
{{- end -}}

{{/* The Secret holding the key the brokers check tokens with (key SECRETKEY or PUBLICKEY). */}}
{{- define "stripemq.auth.keySecret" -}}
{{- $jwt := .Values.auth.authentication.jwt -}}
{{- if $jwt.usingSecretKey -}}
{{- $jwt.secretKeySecret | default (printf "%s-token-symmetric-key" .Release.Name) -}}
{{- else -}}
{{- $jwt.publicKeySecret | default (printf "%s-token-asymmetric-key" .Release.Name) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the toolset's token (key TOKEN). */}}
{{- define "stripemq.auth.clientTokenSecret" -}}
{{- .Values.auth.authentication.jwt.clientTokenSecret | default (printf "%s-token-%s" .Release.Name .Values.auth.superUsers.client) -}}
{{- end -}}

{{/* Mount points, and files under them. Read with (include "stripemq.securityPaths" . | fromYaml). */}}
{{- define "stripemq.securityPaths" -}}
keys: /stripemq/keys
secretKey: token/secret.key
publicKey: token/public.key
tokens: /stripemq/tokens
clientToken: client/token
brokerCerts: /stripemq/certs/broker
ca: /stripemq/certs/ca
{{- end -}}

{{/* The broker settings of tls.* and auth.* as YAML (variable: value), nothing when both are
off. The broker's ConfigMap reads it with fromYaml. */}}
{{- define "stripemq.broker.securitySettings" -}}
{{- $paths := include "stripemq.securityPaths" . | fromYaml -}}
{{- if include "stripemq.tls.broker" . }}
STRIPEMQ_BROKER_SERVICE_PORT_TLS: {{ .Values.broker.ports.pulsarssl }}
STRIPEMQ_WEB_SERVICE_PORT_TLS: {{ .Values.broker.ports.https }}
STRIPEMQ_TLS_CERTIFICATE_FILE_PATH: {{ printf "%s/tls.crt" $paths.brokerCerts | quote }}
STRIPEMQ_TLS_KEY_FILE_PATH: {{ printf "%s/tls.key" $paths.brokerCerts | quote }}
STRIPEMQ_TLS_TRUST_CERTS_FILE_PATH: {{ printf "%s/ca.crt" $paths.ca | quote }}
{{- end }}
{{- with .Values.auth }}
{{- if .authentication.enabled }}
STRIPEMQ_AUTHENTICATION_ENABLED: "true"
STRIPEMQ_AUTHENTICATION_PROVIDERS: "token"
{{- if .authentication.jwt.usingSecretKey }}
STRIPEMQ_TOKEN_SECRET_KEY: {{ printf "file://%s/%s" $paths.keys $paths.secretKey | quote }}
{{- else }}
STRIPEMQ_TOKEN_PUBLIC_KEY: {{ printf "file://%s/%s" $paths.keys $paths.publicKey | quote }}
STRIPEMQ_TOKEN_PUBLIC_ALG: {{ .authentication.jwt.publicAlg | quote }}
{{- end }}
{{- if .authorization.enabled }}
STRIPEMQ_AUTHORIZATION_ENABLED: "true"
STRIPEMQ_SUPER_USER_ROLES: {{ .superUsers | values | compact | uniq | sortAlpha | join "," | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The broker pod's Secret volumes (the token key; the TLS certificate and CA). */}}
{{- define "stripemq.broker.securityVolumes" -}}
{{- $paths := include "stripemq.securityPaths" . | fromYaml -}}
{{- if .Values.auth.authentication.enabled }}
- name: token-keys
  secret:
    secretName: {{ include "stripemq.auth.keySecret" . }}
    defaultMode: 0440
    items:
      {{- if .Values.auth.authentication.jwt.usingSecretKey }}
      - key: SECRETKEY
        path: {{ $paths.secretKey }}
      {{- else }}
      - key: PUBLICKEY
        path: {{ $paths.publicKey }}
      {{- end }}
{{- end }}
{{- if include "stripemq.tls.broker" . }}
- name: broker-certs
  secret:
    secretName: {{ include "stripemq.tls.certSecret" . }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- include "stripemq.tls.caVolume" . }}
{{- end }}
{{- end -}}

{{- define "stripemq.broker.securityMounts" -}}
{{- $paths := include "stripemq.securityPaths" . | fromYaml -}}
{{- if .Values.auth.authentication.enabled }}
- name: token-keys
  mountPath: {{ $paths.keys }}
  readOnly: true
{{- end }}
{{- if include "stripemq.tls.broker" . }}
- name: broker-certs
  mountPath: {{ $paths.brokerCerts }}
  readOnly: true
- name: ca
  mountPath: {{ $paths.ca }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The CA's Secret volume, in the brokers' pods and the toolset's. */}}
{{- define "stripemq.tls.caVolume" }}
- name: ca
  secret:
    secretName: {{ include "stripemq.tls.caSecret" . }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
{{- end -}}

{{/* The toolset pod's Secret volumes (its token; the CA it trusts the brokers by). */}}
{{- define "stripemq.toolset.securityVolumes" -}}
{{- $paths := include "stripemq.securityPaths" . | fromYaml -}}
{{- if .Values.auth.authentication.enabled }}
- name: client-token
  secret:
    secretName: {{ include "stripemq.auth.clientTokenSecret" . }}
    defaultMode: 0440
    items:
      - key: TOKEN
        path: {{ $paths.clientToken }}
{{- end }}
{{- if include "stripemq.tls.broker" . }}
{{- include "stripemq.tls.caVolume" . }}
{{- end }}
{{- end -}}

{{- define "stripemq.toolset.securityMounts" -}}
{{- $paths := include "stripemq.securityPaths" . | fromYaml -}}
{{- if .Values.auth.authentication.enabled }}
- name: client-token
  mountPath: {{ $paths.tokens }}
  readOnly: true
{{- end }}
{{- if include "stripemq.tls.broker" . }}
- name: ca
  mountPath: {{ $paths.ca }}
  readOnly: true
{{- end }}
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
{{- if and .Values.auth.authorization.enabled (not .Values.auth.authentication.enabled) -}}
{{- fail "auth.authorization.enabled needs auth.authentication.enabled: the roles authorized are those clients authenticate as" -}}
{{- end -}}
{{- if .Values.auth.authentication.enabled -}}
{{- if ne .Values.auth.authentication.provider "jwt" -}}
{{- fail (printf "auth.authentication.provider %q: the one provider is jwt" .Values.auth.authentication.provider) -}}
{{- end -}}
{{- $token := include "stripemq.auth.clientTokenSecret" . -}}
{{- if and .Values.components.toolset (not (regexMatch "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$" $token)) -}}
{{- fail (printf "auth.authentication.jwt.clientTokenSecret: %q is no Kubernetes Secret name (lowercase letters, digits, '-' and '.'): name the toolset's token Secret there" $token) -}}
{{- end -}}
{{- end -}}
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
