{{/* Chart name. */}}
{{- define "gpujobs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; leaves room for the longest suffix ("-migrate"). */}}
{{- define "gpujobs.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpujobs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels. */}}
{{- define "gpujobs.labels" -}}
helm.sh/chart: {{ include "gpujobs.chart" . }}
{{ include "gpujobs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpujobs
{{- end }}

{{- define "gpujobs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpujobs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: (dict "ctx" $ "component" "api"). */}}
{{- define "gpujobs.componentLabels" -}}
{{ include "gpujobs.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpujobs.componentSelectorLabels" -}}
{{ include "gpujobs.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Namespace the training Jobs run in. */}}
{{- define "gpujobs.jobsNamespace" -}}
{{- default .Release.Namespace .Values.jobs.namespace }}
{{- end }}

{{- define "gpujobs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpujobs.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* ServiceAccount of trainer pods; empty = the jobs namespace's default. */}}
{{- define "gpujobs.trainerServiceAccountName" -}}
{{- if .Values.trainer.serviceAccount.create }}
{{- default (printf "%s-trainer" (include "gpujobs.fullname" .)) .Values.trainer.serviceAccount.name }}
{{- else }}
{{- .Values.trainer.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Secret holding GPUJOBS_DATABASE_URL, GPUJOBS_ADMIN_TOKEN and the S3 keys. */}}
{{- define "gpujobs.secretName" -}}
{{- default (include "gpujobs.fullname" .) .Values.existingSecret }}
{{- end }}

{{- define "gpujobs.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{- define "gpujobs.publicUrl" -}}
{{- if .Values.publicUrl }}
{{- .Values.publicUrl }}
{{- else }}
{{- printf "http://%s-api.%s.svc.cluster.local:%v" (include "gpujobs.fullname" .) .Release.Namespace .Values.api.service.port }}
{{- end }}
{{- end }}

{{/* Pod-level settings shared by every control-plane pod: (dict "ctx" $ "component" .Values.api). */}}
{{- define "gpujobs.podScheduling" -}}
{{- $ctx := .ctx }}
{{- with $ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $ctx.Values.nodeSelector .component.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $ctx.Values.tolerations .component.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $ctx.Values.affinity .component.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $ctx.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Env wiring of a control-plane container: ConfigMap + Secret + extras. */}}
{{- define "gpujobs.envFrom" -}}
envFrom:
  - configMapRef:
      name: {{ include "gpujobs.fullname" . }}
  - secretRef:
      name: {{ include "gpujobs.secretName" . }}
  {{- with .Values.extraEnvFrom }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Writable scratch for a read-only root filesystem. */}}
{{- define "gpujobs.scratchVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /var/lib/gpujobs
{{- end }}

{{- define "gpujobs.scratchVolumes" -}}
- name: tmp
  emptyDir: {}
- name: home
  emptyDir: {}
{{- end }}

{{/* Roll pods when their configuration changes. */}}
{{- define "gpujobs.configChecksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if not .Values.existingSecret }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/* ServiceAccount of the API pods: no launcher rights. */}}
{{- define "gpujobs.apiServiceAccountName" -}}
{{- if .Values.api.serviceAccount.create }}
{{- default (printf "%s-api" (include "gpujobs.fullname" .)) .Values.api.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.api.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Cluster-scoped names must be unique across releases and namespaces. */}}
{{- define "gpujobs.clusterRoleName" -}}
{{- printf "%s-%s-node-reader" (include "gpujobs.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}
