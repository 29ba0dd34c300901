{{/* The release's full name, at most 63 characters. */}}
{{- define "podsweep.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "podsweep.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "podsweep.labels" -}}
{{ include "podsweep.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "podsweep.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "podsweep.fullname" .) -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding kyuubi-defaults.conf: Kyuubi's, or the chart's own for kyuubiConf.inline. */}}
{{- define "podsweep.confMap" -}}
{{- if .Values.kyuubiConf.inline -}}
{{- printf "%s-kyuubi-conf" (include "podsweep.fullname" .) -}}
{{- else -}}
{{- required "kyuubiConf.configMap (Kyuubi's ConfigMap) or kyuubiConf.inline is required" .Values.kyuubiConf.configMap -}}
{{- end -}}
{{- end -}}

{{/* The namespaces cleaned: rbac.namespaces, else the release namespace. */}}
{{- define "podsweep.namespaces" -}}
{{- if .Values.rbac.namespaces -}}
{{- join " " .Values.rbac.namespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}
