{{/*
The pieces every object shares. Names: <fullname>-<component>, so a release named `minruntime`
gives the names of deploy/kubernetes/ (minruntime-processor, minruntime-cluster, ...). The
fullname is cut at 40 characters so that every <fullname>-<component> is still a valid label
value (63).
*/}}

{{- define "minruntime.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: (list $ "processor") -> minruntime-processor. */}}
{{- define "minruntime.component" -}}
{{- printf "%s-%s" (include "minruntime.fullname" (index . 0)) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "minruntime.serviceAccountName" -}}
{{- include "minruntime.component" (list . "cluster") -}}
{{- end -}}

{{/* The bridge's Lease: its Role may read and renew only this one. */}}
{{- define "minruntime.leaseName" -}}
{{- include "minruntime.component" (list . "kube-bridge") -}}
{{- end -}}

{{/* The pod selector of one component: (list $ "minruntime-processor"). */}}
{{- define "minruntime.selectorLabels" -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/* Labels of an object: (list $ NAME), NAME "" for objects of no one component. */}}
{{- define "minruntime.labels" -}}
{{- $root := index . 0 -}}
{{- if index . 1 -}}
app.kubernetes.io/name: {{ index . 1 }}
{{ end -}}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/part-of: minruntime
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "minruntime.kafkaTls" -}}
{{- and .Values.kafka.tls.existingSecret (has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL")) -}}
{{- end -}}

{{- define "minruntime.kafkaSasl" -}}
{{- has .Values.kafka.securityProtocol (list "SASL_PLAINTEXT" "SASL_SSL") -}}
{{- end -}}

{{/*
The settings every pod reads (the ConfigMap's data, and the migrate Job's env: a pre-install
hook runs before the ConfigMap exists). Every key is a MINRUNTIME_* setting; `config` adds
any other, never one the chart sets from its own values.
*/}}
{{- define "minruntime.configData" -}}
{{- $kafka := .Values.kafka -}}
{{- $protocol := $kafka.securityProtocol -}}
{{- $kai := .Values.kai.schedulerConfig -}}
{{- $data := dict
    "MINRUNTIME_KAFKA_BOOTSTRAP" $kafka.bootstrap
    "MINRUNTIME_KAFKA_SECURITY_PROTOCOL" $protocol
    "MINRUNTIME_METRICS_HOST" "0.0.0.0"
    "MINRUNTIME_PROCESSOR_METRICS_PORT" (toJson .Values.metrics.processorPort)
    "MINRUNTIME_WORKER_METRICS_PORT" (toJson .Values.metrics.workerPort)
    "MINRUNTIME_KUBE_BRIDGE_METRICS_PORT" (toJson .Values.metrics.bridgePort)
    "MINRUNTIME_KUBE_EVICTOR_METRICS_PORT" (toJson .Values.metrics.evictorPort)
    "MINRUNTIME_KUBE_NAMESPACE" .Release.Namespace
    "MINRUNTIME_KUBE_LEASE_NAME" (include "minruntime.leaseName" .)
    "MINRUNTIME_KUBE_SCHEDULER_CONFIG" (printf "%s/%s" $kai.namespace $kai.name)
    "MINRUNTIME_KUBE_SCHEDULER_NODE_POOL" $kai.nodePool
    "MINRUNTIME_KUBE_NODE_POOL_LABEL" .Values.kai.nodePoolLabel -}}
{{- if eq (include "minruntime.kafkaSasl" .) "true" -}}
{{- if not $kafka.sasl.existingSecret -}}
{{- fail (printf "kafka.sasl.existingSecret is required with kafka.securityProtocol %s" $protocol) -}}
{{- end -}}
{{- $_ := set $data "MINRUNTIME_KAFKA_SASL_MECHANISM" $kafka.sasl.mechanism -}}
{{- with $kafka.sasl.username -}}
{{- $_ := set $data "MINRUNTIME_KAFKA_USERNAME" . -}}
{{- end -}}
{{- end -}}
{{- if has $protocol (list "SSL" "SASL_SSL") -}}
{{- $_ := set $data "MINRUNTIME_KAFKA_SSL_CHECK_HOSTNAME" (toJson $kafka.tls.checkHostname) -}}
{{- if ne (empty $kafka.tls.certKey) (empty $kafka.tls.keyKey) -}}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey: both or neither" -}}
{{- end -}}
{{- if $kafka.tls.existingSecret -}}
{{- $_ := set $data "MINRUNTIME_KAFKA_SSL_CAFILE" (printf "/etc/minruntime/kafka-tls/%s" $kafka.tls.caKey) -}}
{{- with $kafka.tls.certKey -}}
{{- $_ := set $data "MINRUNTIME_KAFKA_SSL_CERTFILE" (printf "/etc/minruntime/kafka-tls/%s" .) -}}
{{- $_ := set $data "MINRUNTIME_KAFKA_SSL_KEYFILE" (printf "/etc/minruntime/kafka-tls/%s" $kafka.tls.keyKey) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $key, $value := .Values.config -}}
{{- if not (hasPrefix "MINRUNTIME_" $key) -}}
{{- fail (printf "config.%s: every key is a MINRUNTIME_* setting" $key) -}}
{{- end -}}
{{- if hasKey $data $key -}}
{{- fail (printf "config.%s: the chart sets it from its values (kafka, kai, metrics, the release)" $key) -}}
{{- end -}}
{{- /* toJson: a number as written (toString would give 2e+06 for 2000000) */ -}}
{{- $_ := set $data $key ((kindIs "string" $value) | ternary $value (toJson $value)) -}}
{{- end -}}
{{- toYaml $data -}}
{{- end -}}

{{/*
A container's secret settings, by what it uses: (dict "root" $ "database" true "owner" true
"reader" true "kafka" true; reader: it only reads, so database.readerUrlKey when set). Each
one is a key of an existing Secret: a pod gets only what it needs.
*/}}
{{- define "minruntime.secretEnv" -}}
{{- $values := .root.Values -}}
{{- if .database }}
{{- $urlKey := $values.database.urlKey }}
{{- if and .reader $values.database.readerUrlKey }}
{{- $urlKey = $values.database.readerUrlKey }}
{{- end }}
- name: MINRUNTIME_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ $values.database.existingSecret | quote }}, key: {{ $urlKey | quote }}}
{{- if and .owner $values.database.ownerUrlKey }}
- name: MINRUNTIME_OWNER_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ $values.database.existingSecret | quote }}, key: {{ $values.database.ownerUrlKey | quote }}}
{{- end }}
{{- end }}
{{- if and .kafka (eq (include "minruntime.kafkaSasl" .root) "true") }}
{{- if not $values.kafka.sasl.username }}
- name: MINRUNTIME_KAFKA_USERNAME
  valueFrom:
    secretKeyRef: {name: {{ $values.kafka.sasl.existingSecret | quote }}, key: {{ $values.kafka.sasl.usernameKey | quote }}}
{{- end }}
- name: MINRUNTIME_KAFKA_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $values.kafka.sasl.existingSecret | quote }}, key: {{ $values.kafka.sasl.passwordKey | quote }}}
{{- end }}
{{- end -}}

{{/* The TLS Secrets a container mounts, by what it uses (the same dict as secretEnv). */}}
{{- define "minruntime.tlsMounts" -}}
{{- if and .database .root.Values.database.tls.existingSecret }}
- {name: postgres-tls, mountPath: /etc/minruntime/postgres-tls, readOnly: true}
{{- end }}
{{- if and .kafka (eq (include "minruntime.kafkaTls" .root) "true") }}
- {name: kafka-tls, mountPath: /etc/minruntime/kafka-tls, readOnly: true}
{{- end }}
{{- end -}}

{{/* 0440 and the pod's fsGroup: readable by the image's user, a key acceptable to libpq. */}}
{{- define "minruntime.tlsVolumes" -}}
{{- if and .database .root.Values.database.tls.existingSecret }}
- name: postgres-tls
  secret: {secretName: {{ .root.Values.database.tls.existingSecret | quote }}, defaultMode: 0440}
{{- end }}
{{- if and .kafka (eq (include "minruntime.kafkaTls" .root) "true") }}
- name: kafka-tls
  secret: {secretName: {{ .root.Values.kafka.tls.existingSecret | quote }}, defaultMode: 0440}
{{- end }}
{{- end -}}

{{/*
The pod's security context: the image's non-root user; an fsGroup where a volume must be
writable or readable by it (dict "root" $ "fsGroup" true|false, plus what it uses).
*/}}
{{- define "minruntime.podSecurityContext" -}}
{{- $fsGroup := or .fsGroup (include "minruntime.tlsVolumes" . | trim) -}}
securityContext: {runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001{{ if $fsGroup }}, fsGroup: 10001{{ end }}}
{{- end -}}

{{/* nodeSelector and tolerations: the component's own, else the chart's. (list $ COMPONENT) */}}
{{- define "minruntime.scheduling" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- with ($component.nodeSelector | default $root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($component.tolerations | default $root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* YAML list pieces, the empty ones left out, one after the other. */}}
{{- define "minruntime.joinYaml" -}}
{{- $pieces := list -}}
{{- range . -}}
{{- with . | default "" | trim -}}
{{- $pieces = append $pieces . -}}
{{- end -}}
{{- end -}}
{{- join "\n" $pieces -}}
{{- end -}}

{{/*
The pod template of every workload. A dict:
  root      $
  name      the component's object name (its labels)
  values    the component's values (resources, nodeSelector, tolerations)
  container the container's name; args: its arguments after `minruntime`
  database, owner, reader, kafka   what it uses (secretEnv, tlsMounts); api: it calls the API server
  fsGroup   a volume it writes; metricsPort: its port serving /metrics; ready: that port's
            /metrics is its readiness
  env, mounts, volumes, affinity   YAML of its own extras; job: a Job's pod (settings as env:
            a pre-install hook runs before the ConfigMap exists)
*/}}
{{- define "minruntime.podTemplate" -}}
{{- $root := .root -}}
{{- $mounts := include "minruntime.joinYaml" (list .mounts (include "minruntime.tlsMounts" .)) -}}
{{- $volumes := include "minruntime.joinYaml" (list .volumes (include "minruntime.tlsVolumes" .)) -}}
metadata:
  labels:
    {{- include "minruntime.labels" (list $root .name) | nindent 4 }}
spec:
  {{- if .job }}
  restartPolicy: OnFailure
  {{- end }}
  {{- if .api }}
  serviceAccountName: {{ include "minruntime.serviceAccountName" $root }}
  {{- else }}
  automountServiceAccountToken: false
  {{- end }}
  {{- include "minruntime.podSecurityContext" . | nindent 2 }}
  {{- with include "minruntime.scheduling" (list $root .values) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- with .affinity }}
  affinity:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .container }}
      image: {{ printf "%s:%s" $root.Values.image.repository $root.Values.image.tag | quote }}
      {{- with $root.Values.image.pullPolicy }}
      imagePullPolicy: {{ . }}
      {{- end }}
      args: {{ toJson .args }}
      {{- if not .job }}
      envFrom:
        - configMapRef: {name: {{ include "minruntime.fullname" $root }}}
      {{- end }}
      {{- $env := include "minruntime.joinYaml" (list .env (include "minruntime.secretEnv" .)) }}
      {{- if or .job $env }}
      env:
        {{- if .job }}
        {{- range $key, $value := include "minruntime.configData" $root | fromYaml }}
        - {name: {{ $key }}, value: {{ $value | toString | quote }}}
        {{- end }}
        {{- end }}
        {{- with $env }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- end }}
      {{- with .metricsPort }}
      ports:
        - {name: metrics, containerPort: {{ . }}}
      {{- end }}
      {{- if .ready }}
      # The metrics endpoint listens once the schema is checked and the topics exist.
      readinessProbe:
        httpGet: {path: /metrics, port: metrics}
        periodSeconds: 10
      {{- end }}
      {{- with $mounts }}
      volumeMounts:
        {{- . | nindent 8 }}
      {{- end }}
      securityContext:
        allowPrivilegeEscalation: false
        capabilities: {drop: ["ALL"]}
      resources:
        {{- toYaml .values.resources | nindent 8 }}
  {{- with $volumes }}
  volumes:
    {{- . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The bridge or the evictor runs: the ServiceAccount and the API token are needed. */}}
{{- define "minruntime.callsTheApi" -}}
{{- or .Values.bridge.enabled .Values.evictor.enabled -}}
{{- end -}}

{{/* Prometheus Operator objects are rendered only where its CRDs are installed. */}}
{{- define "minruntime.operator" -}}
{{- .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}
{{- end -}}

{{/*
The bridge's values with its memory sized from bridge.clusterPods (values.yaml): request =
100 Mi + 4 Ki per pod, limit = 1.5 x that, unless resources set a memory themselves.
*/}}
{{- define "minruntime.bridgeValues" -}}
{{- $pods := int .Values.bridge.clusterPods -}}
{{- if lt $pods 1 }}{{ fail "bridge.clusterPods must be a number of pods, at least 1" }}{{ end -}}
{{- $peak := add 100 (div (mul 4 $pods) 1024) -}}
{{- $resources := deepCopy (default (dict) .Values.bridge.resources) -}}
{{- $requests := deepCopy (default (dict) $resources.requests) -}}
{{- if not (hasKey $requests "memory") }}{{ $_ := set $requests "memory" (printf "%dMi" $peak) }}{{ end -}}
{{- $limits := deepCopy (default (dict) $resources.limits) -}}
{{- if not (hasKey $limits "memory") }}{{ $_ := set $limits "memory" (printf "%dMi" (div (mul $peak 3) 2)) }}{{ end -}}
{{- $_ := set $resources "requests" $requests -}}
{{- $_ := set $resources "limits" $limits -}}
{{- $values := deepCopy .Values.bridge -}}
{{- $_ := set $values "resources" $resources -}}
{{- toYaml $values -}}
{{- end -}}
