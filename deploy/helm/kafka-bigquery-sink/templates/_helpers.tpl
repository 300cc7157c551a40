{{/* The chart's name, or nameOverride. */}}
{{- define "kbq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, else the release's name (with the chart's name unless it
already holds it). */}}
{{- define "kbq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "kbq.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kbq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kbq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kbq.labels" -}}
{{ include "kbq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kbq.serviceAccountName" -}}
{{- default (include "kbq.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kbq.configMapName" -}}
{{- default (include "kbq.fullname" .) .Values.existingConfigMap -}}
{{- end -}}

{{/* The daemon's config with metrics.listen on metricsPort. */}}
{{- define "kbq.config" -}}
{{- $listen := dict "metrics" (dict "listen" (printf "0.0.0.0:%d" (int .Values.metricsPort))) -}}
{{- toYaml (mergeOverwrite (deepCopy .Values.config) $listen) -}}
{{- end -}}

{{/* shutdown_deadline in seconds (the config's "45s" form; 25 s when unset, the daemon's default). */}}
{{- define "kbq.shutdownSeconds" -}}
{{- $deadline := default "25s" .Values.config.shutdown_deadline | toString -}}
{{- if not (regexMatch "^[0-9]+s$" $deadline) -}}
{{- fail (printf "config.shutdown_deadline: write it in seconds (\"45s\") for the chart to check terminationGracePeriodSeconds against it, not %q" $deadline) -}}
{{- end -}}
{{- trimSuffix "s" $deadline -}}
{{- end -}}
