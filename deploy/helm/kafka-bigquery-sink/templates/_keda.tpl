{{/*
The KEDA trigger's view of the daemon's Kafka settings. Everything here is derived from
config.kafka (or keda.kafka, which must repeat it when the config is an existingConfigMap the chart
cannot read), so that the scaler connects the way the sink does.
*/}}

{{/* The Kafka settings the trigger follows. */}}
{{- define "kbq.keda.kafka" -}}
{{- if .Values.keda.kafka -}}
{{- toYaml .Values.keda.kafka -}}
{{- else if .Values.existingConfigMap -}}
{{- fail "keda.enabled with existingConfigMap: the chart cannot read that ConfigMap; set keda.kafka to its kafka section (bootstrap_servers, group_id, topics or topic_pattern, properties)" -}}
{{- else -}}
{{- toYaml (required "config.kafka is required" .Values.config.kafka) -}}
{{- end -}}
{{- end -}}

{{/*
One config value as KEDA takes it: {literal: VALUE}, or {env: NAME} for `${NAME}` (KEDA reads the
scale target's container environment, Secrets included), or for `${NAME:-default}` the default
when the chart's env and envFrom cannot set NAME. Anything else holding `${` is refused: KEDA
would read it literally. Called with (list ROOT FIELD VALUE).
*/}}
{{- define "kbq.keda.value" -}}
{{- $root := index . 0 -}}
{{- $field := index . 1 -}}
{{- $value := index . 2 | toString -}}
{{- $match := regexFindAll "^\\$\\{([A-Za-z_][A-Za-z0-9_]*)(:-.*)?\\}$" $value 1 -}}
{{- if $match -}}
{{- $name := regexReplaceAll "^\\$\\{([A-Za-z_][A-Za-z0-9_]*)(:-.*)?\\}$" $value "${1}" -}}
{{- $hasDefault := contains ":-" $value -}}
{{- $declared := false -}}
{{- range $root.Values.env -}}
{{- if eq .name $name -}}{{- $declared = true -}}{{- end -}}
{{- end -}}
{{- if or (not $hasDefault) $declared $root.Values.envFrom -}}
env: {{ $name | quote }}
{{- else -}}
literal: {{ regexReplaceAll "^\\$\\{[A-Za-z_][A-Za-z0-9_]*:-(.*)\\}$" $value "${1}" | quote }}
{{- end -}}
{{- else if contains "${" $value -}}
{{- fail (printf "%s: KEDA cannot substitute %q; write the whole value as one ${VAR} set in env" $field $value) -}}
{{- else -}}
literal: {{ $value | quote }}
{{- end -}}
{{- end -}}

{{/* A librdkafka property of the trigger's Kafka settings, "" when unset (case as written). */}}
{{- define "kbq.keda.property" -}}
{{- $kafka := index . 0 -}}
{{- $name := index . 1 -}}
{{- $properties := default (dict) $kafka.properties -}}
{{- if hasKey $properties $name -}}{{- index $properties $name | toString -}}{{- end -}}
{{- end -}}

{{/*
The trigger's security: {sasl, tls, username, password} from security.protocol and
sasl.mechanism(s) (librdkafka's names), username and password as kbq.keda.value.
*/}}
{{- define "kbq.keda.security" -}}
{{- $kafka := include "kbq.keda.kafka" . | fromYaml -}}
{{- $protocol := include "kbq.keda.property" (list $kafka "security.protocol") | default "PLAINTEXT" | upper -}}
{{- if not (has $protocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL")) -}}
{{- fail (printf "kafka.properties.\"security.protocol\": %q is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" $protocol) -}}
{{- end -}}
tls: {{ ternary "enable" "disable" (hasSuffix "SSL" $protocol) }}
{{- if hasPrefix "SASL" $protocol }}
{{- $mechanism := include "kbq.keda.property" (list $kafka "sasl.mechanism") | default (include "kbq.keda.property" (list $kafka "sasl.mechanisms")) | default "GSSAPI" | upper -}}
{{- $sasl := get (dict "PLAIN" "plaintext" "SCRAM-SHA-256" "scram_sha256" "SCRAM-SHA-512" "scram_sha512") $mechanism -}}
{{- if not $sasl -}}
{{- fail (printf "kafka.properties.\"sasl.mechanism\": the chart derives KEDA's authentication for PLAIN and SCRAM only, not %s; write the ScaledObject yourself (keda.enabled: false)" $mechanism) -}}
{{- end }}
sasl: {{ $sasl }}
username:
  {{- include "kbq.keda.value" (list . "kafka.properties.\"sasl.username\"" (required "kafka.properties.\"sasl.username\" is required with SASL" (include "kbq.keda.property" (list $kafka "sasl.username")))) | nindent 2 }}
password:
  {{- include "kbq.keda.value" (list . "kafka.properties.\"sasl.password\"" (required "kafka.properties.\"sasl.password\" is required with SASL" (include "kbq.keda.property" (list $kafka "sasl.password")))) | nindent 2 }}
{{- else }}
sasl: none
{{- end }}
{{- end -}}

{{/* checkpoint.interval in milliseconds (the daemon's default, 5 s, when unset). */}}
{{- define "kbq.keda.checkpointMillis" -}}
{{- $interval := "5s" -}}
{{- if and .Values.config.checkpoint .Values.config.checkpoint.interval -}}
{{- $interval = .Values.config.checkpoint.interval | toString -}}
{{- end -}}
{{- if regexMatch "^[0-9]+ms$" $interval -}}
{{- trimSuffix "ms" $interval -}}
{{- else if regexMatch "^[0-9]+s$" $interval -}}
{{- mul (trimSuffix "s" $interval | int64) 1000 -}}
{{- else if regexMatch "^[0-9]+m$" $interval -}}
{{- mul (trimSuffix "m" $interval | int64) 60000 -}}
{{- else -}}
{{- fail (printf "config.checkpoint.interval: the chart reads it in ms, s or m (\"5s\") to derive keda.lagThreshold, not %q; or set keda.lagThreshold" $interval) -}}
{{- end -}}
{{- end -}}

{{/*
The lag per replica at which KEDA adds one (docs/operations.md, Autoscaling): the committed lag
of a group without backlog is its rate times a checkpoint cycle (offsets are committed once per
checkpoint.interval, plus about a second for the cycle itself), so with
lagThreshold = recordsPerSecondPerReplica x (interval + 1 s), ceil(lag / lagThreshold) is the
replica count the rate needs, and a backlog adds replicas in proportion.
*/}}
{{- define "kbq.keda.lagThreshold" -}}
{{- if .Values.keda.lagThreshold -}}
{{- .Values.keda.lagThreshold | toString -}}
{{- else -}}
{{- $cycleMillis := add (include "kbq.keda.checkpointMillis" . | int64) 1000 -}}
{{- div (mul (int64 .Values.keda.recordsPerSecondPerReplica) $cycleMillis) 1000 | toString -}}
{{- end -}}
{{- end -}}
