{{- define "vllm-headroom.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vllm-headroom.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "vllm-headroom.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{/* The sidecar container, shared by the chart's own Deployment and the printed patch for an existing one. */}}
{{- define "vllm-headroom.sidecar" -}}
name: vllm-headroom
image: {{ include "vllm-headroom.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if .Values.sidecar.native }}
restartPolicy: Always
{{- end }}
env:
  - name: VLLM_HEADROOM_TARGET
    value: {{ printf "%s://127.0.0.1:%v" (ternary "https" "http" .Values.vllm.tls.enabled) .Values.vllm.port | quote }}
  {{- with .Values.vllm.tls }}
  {{- if .enabled }}
  {{- if .caSecret }}
  - name: VLLM_HEADROOM_SCRAPE_CA_FILE
    value: /etc/vllm-headroom/tls/ca/ca.crt
  {{- end }}
  {{- if .serverName }}
  - name: VLLM_HEADROOM_SCRAPE_TLS_SERVER_NAME
    value: {{ .serverName | quote }}
  {{- end }}
  {{- if .clientCertSecret }}
  - name: VLLM_HEADROOM_SCRAPE_CLIENT_CERT
    value: /etc/vllm-headroom/tls/client/tls.crt
  - name: VLLM_HEADROOM_SCRAPE_CLIENT_KEY
    value: /etc/vllm-headroom/tls/client/tls.key
  {{- end }}
  {{- if .insecureSkipVerify }}
  - name: VLLM_HEADROOM_SCRAPE_INSECURE_SKIP_VERIFY
    value: "true"
  {{- end }}
  {{- end }}
  {{- end }}
  - name: VLLM_HEADROOM_WEB_LISTEN_ADDRESS
    value: {{ printf "0.0.0.0:%v" .Values.sidecar.port | quote }}
  - name: VLLM_HEADROOM_WEB_HEALTH_ADDRESS
    value: {{ printf "0.0.0.0:%v" .Values.sidecar.healthPort | quote }}
  - name: VLLM_HEADROOM_SCRAPE_INTERVAL
    value: {{ .Values.sidecar.scrapeInterval | quote }}
  - name: VLLM_HEADROOM_VERDICT_FULL_USAGE
    value: {{ .Values.thresholds.fullUsage | quote }}
  - name: VLLM_HEADROOM_VERDICT_FALSE_FULL_HOLD
    value: {{ .Values.thresholds.falseFullHold | quote }}
  - name: VLLM_HEADROOM_VERDICT_STUCK_AFTER
    value: {{ .Values.thresholds.stuckAfter | quote }}
  - name: VLLM_HEADROOM_VERDICT_LEAK_AFTER
    value: {{ .Values.thresholds.leakAfter | quote }}
  - name: VLLM_HEADROOM_VERDICT_PREEMPT_WINDOW
    value: {{ .Values.thresholds.preemptWindow | quote }}
  - name: VLLM_HEADROOM_PROFILE_QUANTILE
    value: {{ .Values.profile.quantile | quote }}
  - name: VLLM_HEADROOM_PROFILE_WINDOW
    value: {{ .Values.profile.window | quote }}
  {{- with .Values.sidecar.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  - name: headroom
    containerPort: {{ .Values.sidecar.port }}
    protocol: TCP
  - name: headroom-health
    containerPort: {{ .Values.sidecar.healthPort }}
    protocol: TCP
startupProbe:
  httpGet: {path: /healthz, port: headroom-health}
  periodSeconds: 1
  failureThreshold: 30
livenessProbe:
  httpGet: {path: /healthz, port: headroom-health}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /healthz, port: headroom-health}
  periodSeconds: 10
  timeoutSeconds: 3
resources:
  {{- toYaml .Values.sidecar.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.sidecar.securityContext | nindent 2 }}
{{- with include "vllm-headroom.tlsMounts" . }}
volumeMounts:
  {{- . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The sidecar's mounts of vllm.tls's Secrets ("" without TLS secrets). */}}
{{- define "vllm-headroom.tlsMounts" -}}
{{- with .Values.vllm.tls }}
{{- if and .enabled .caSecret }}
- name: vllm-headroom-tls-ca
  mountPath: /etc/vllm-headroom/tls/ca
  readOnly: true
{{- end }}
{{- if and .enabled .clientCertSecret }}
- name: vllm-headroom-tls-client
  mountPath: /etc/vllm-headroom/tls/client
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{/* The pod's volumes for those mounts ("" without TLS secrets). */}}
{{- define "vllm-headroom.tlsVolumes" -}}
{{- with .Values.vllm.tls }}
{{- if and .enabled .caSecret }}
- name: vllm-headroom-tls-ca
  secret:
    secretName: {{ .caSecret }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- if and .enabled .clientCertSecret }}
- name: vllm-headroom-tls-client
  secret:
    secretName: {{ .clientCertSecret }}
    items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]
{{- end }}
{{- end }}
{{- end -}}

{{/* prometheus-operator's scheme and tlsConfig of the endpoint that scrapes vLLM itself, from vllm.tls. */}}
{{- define "vllm-headroom.vllmTls" -}}
{{- with .Values.vllm.tls }}
{{- if .enabled }}
scheme: https
tlsConfig:
  {{- if .caSecret }}
  ca:
    secret: {name: {{ .caSecret }}, key: ca.crt}
  {{- end }}
  {{- if .clientCertSecret }}
  cert:
    secret: {name: {{ .clientCertSecret }}, key: tls.crt}
  keySecret: {name: {{ .clientCertSecret }}, key: tls.key}
  {{- end }}
  {{- if .serverName }}
  serverName: {{ .serverName | quote }}
  {{- end }}
  {{- if .insecureSkipVerify }}
  insecureSkipVerify: true
  {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod spec fields the sidecar needs, as a strategic-merge patch of a Deployment. */}}
{{- define "vllm-headroom.patch" -}}
spec:
  template:
    metadata:
      labels:
        {{- include "vllm-headroom.injectedLabels" . | nindent 8 }}
    spec:
      shareProcessNamespace: true
      {{ if .Values.sidecar.native }}initContainers{{ else }}containers{{ end }}:
        - {{- include "vllm-headroom.sidecar" . | nindent 10 }}
      {{- with include "vllm-headroom.tlsVolumes" . }}
      volumes:
        {{- . | nindent 8 }}
      {{- end }}
{{- end -}}

{{- define "vllm-headroom.endpoints" -}}
{{- $m := .monitor -}}
- port: headroom
  path: /metrics
  interval: {{ $m.interval }}
  scrapeTimeout: {{ $m.scrapeTimeout }}
  {{- with $m.honorLabels }}
  honorLabels: {{ . }}
  {{- end }}
  relabelings:
    - targetLabel: job
      replacement: vllm-headroom
    {{- with $m.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- if $m.scrapeVllm }}
{{- if kindIs "string" .vllmPort }}
- port: {{ .vllmPort }}
{{- else }}
- portNumber: {{ .vllmPort }}
{{- end }}
  path: /metrics
  {{- with (.tls | trim) }}
  {{- . | nindent 2 }}
  {{- end }}
  interval: {{ $m.interval }}
  scrapeTimeout: {{ $m.scrapeTimeout }}
  {{- with $m.honorLabels }}
  honorLabels: {{ . }}
  {{- end }}
  relabelings:
    - targetLabel: job
      replacement: vllm
    {{- with $m.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Labels the sidecar's patch adds to the vLLM pods: what the monitors select unless vllm.podLabels is set. */}}
{{- define "vllm-headroom.injectedLabels" -}}
vllm-headroom/sidecar: injected
vllm-headroom/release: {{ .Release.Name | quote }}
{{- end -}}

{{/* The selector of the vLLM pods: vllm.podLabels if given (not merged with anything), else the injected labels. */}}
{{- define "vllm-headroom.podLabels" -}}
{{- if .Values.vllm.podLabels -}}
{{- toYaml .Values.vllm.podLabels -}}
{{- else -}}
{{- include "vllm-headroom.injectedLabels" . -}}
{{- end -}}
{{- end -}}

{{/* Labels of the chart's own vLLM Deployment (vllm.deployment.create): its selector. */}}
{{- define "vllm-headroom.ownLabels" -}}
{{- toYaml (.Values.vllm.podLabels | default (dict "app.kubernetes.io/name" "vllm")) -}}
{{- end -}}

{{/* One sentence and a stop for values that cannot work, checked by every template that renders objects. */}}
{{- define "vllm-headroom.checks" -}}
{{- $scrapes := or .Values.podMonitor.enabled .Values.serviceMonitor.enabled .Values.service.enabled -}}
{{- if and $scrapes (not .Values.vllm.deployment.create) (not .Values.vllm.deploymentName) -}}
{{- fail "vllm.deploymentName is empty: set it to the name of the vLLM Deployment the sidecar goes into (--set vllm.deploymentName=<name>; the printed kubectl patch targets it), or set vllm.deployment.create=true to let the chart run vLLM" -}}
{{- end -}}
{{- if and .Values.vllm.tls.enabled .Values.vllm.tls.insecureSkipVerify (or .Values.vllm.tls.caSecret .Values.vllm.tls.serverName) -}}
{{- fail "vllm.tls.insecureSkipVerify checks nothing, so vllm.tls.caSecret and vllm.tls.serverName would be ignored: set insecureSkipVerify=false (recommended) or clear them" -}}
{{- end -}}
{{- if and .Values.sidecar.native (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "sidecar.native=true needs Kubernetes >= 1.29 (native sidecars), this cluster is %s: set sidecar.native=false to run the sidecar as a plain second container" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}

{{/* A string as the inside of a JSON string literal: what the generated JSON templates insert (any value stays JSON). */}}
{{- define "vllm-headroom.jsonString" -}}
{{- toJson (toString .) | trimPrefix "\"" | trimSuffix "\"" -}}
{{- end -}}

{{/* Seconds of a duration (Go's syntax: 90s, 20m, 1h30m), written like Python's "%g" (grafana.rules' seconds). */}}
{{- define "vllm-headroom.durationSeconds" -}}
{{- $t := toDate "2006-01-02" "2000-01-01" -}}
{{- printf "%.6g" (float64 (sub (mustDateModify (toString .) $t | unixEpoch | atoi) ($t | unixEpoch | atoi))) -}}
{{- end -}}

{{/* A duration in prose as grafana.rules writes it: "20 minutes", "1.5 minutes", "45 seconds". */}}
{{- define "vllm-headroom.durationText" -}}
{{- $s := include "vllm-headroom.durationSeconds" . | float64 -}}
{{- if ge $s 60.0 -}}
{{- printf "%.6g minutes" (divf $s 60) -}}
{{- else -}}
{{- printf "%.6g seconds" $s -}}
{{- end -}}
{{- end -}}
