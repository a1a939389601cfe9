{{/* Names and labels of the supervaizer-sidecar chart. */}}

{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "supervaizer.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels selecting the injector's pods. */}}
{{- define "supervaizer.selectorLabels" -}}
app.kubernetes.io/name: supervaizer-injector
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object of the chart. */}}
{{- define "supervaizer.labels" -}}
{{ include "supervaizer.selectorLabels" . }}
app.kubernetes.io/part-of: supervaizer
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}: the digest wins. */}}
{{- define "supervaizer.image" -}}
{{- $img := index . 0 -}}{{- $ctx := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $ctx.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The injector's Service DNS name. */}}
{{- define "supervaizer.serviceHost" -}}
{{- printf "%s.%s.svc" (include "supervaizer.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* true when the serving certificate comes from cert-manager. */}}
{{- define "supervaizer.certManager" -}}
{{- $src := .Values.tls.source -}}
{{- if not (has $src (list "auto" "certManager" "helm")) -}}
{{- fail (printf "tls.source %q: want auto, certManager or helm" $src) -}}
{{- end -}}
{{- if eq $src "certManager" -}}
true
{{- else if and (eq $src "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}
true
{{- end -}}
{{- end -}}
