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

{{- define "podsweep.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The ConfigMap holding kyuubi-defaults.conf: Kyuubi's, or the chart's own for kyuubiConf.inline. */}}
{{- define "podsweep.confMap" -}}
{{- if .Values.kyuubiConf.inline -}}
{{- printf "%s-kyuubi-conf" (include "podsweep.fullname" .) -}}
{{- else -}}
{{- required "kyuubiConf.configMap (Kyuubi's ConfigMap), kyuubiConf.secret or kyuubiConf.inline is required" .Values.kyuubiConf.configMap -}}
{{- end -}}
{{- end -}}

{{/* The volume that holds the configuration file: Kyuubi's ConfigMap, a Secret, or the inline text's ConfigMap. */}}
{{- define "podsweep.confVolume" -}}
- name: kyuubi-conf
{{- if and .Values.kyuubiConf.secret (not .Values.kyuubiConf.inline) }}
  secret:
    secretName: {{ .Values.kyuubiConf.secret }}
{{- else }}
  configMap:
    name: {{ include "podsweep.confMap" . }}
{{- end }}
    items:
      - key: {{ .Values.kyuubiConf.key }}
        path: {{ .Values.kyuubiConf.key }}
{{- end -}}

{{/*
The last value of a key in a Java properties text (lines `key=value`, `key: value` or
`key value`; continuation lines are not followed), or "" when it has none.
Call with (list TEXT KEY).
*/}}
{{- define "podsweep.propValue" -}}
{{- $text := index . 0 | default "" -}}
{{- $key := index . 1 -}}
{{- $re := printf "(?m)^[ \\t]*%s(?:[ \\t]*[=:][ \\t]*|[ \\t]+)(.*)$" (regexQuoteMeta $key) -}}
{{- $all := regexFindAll $re $text -1 -}}
{{- if $all -}}
{{- regexReplaceAll $re (last $all) "${1}" | trim -}}
{{- end -}}
{{- end -}}

{{/* A key's value as the daemons read it: `conf` over the inline text (what the chart can see). */}}
{{- define "podsweep.seenValue" -}}
{{- $v := index .Values.conf (index . "key") | default "" | toString -}}
{{- if $v -}}
{{- $v -}}
{{- else -}}
{{- include "podsweep.propValue" (list .Values.kyuubiConf.inline (index . "key")) -}}
{{- end -}}
{{- end -}}

{{/*
The scopes, as YAML: `source` (rbac.namespaces, conf or kyuubiConf.inline), `list` (the
initialize list the chart passes, when the scopes come from rbac.namespaces), `namespaces` (where
the Roles go) and `withContext` (entries naming a kubeconfig context: another cluster's RBAC).
*/}}
{{- define "podsweep.scopes" -}}
{{- $initKey := "kyuubi.kubernetes.client.initialize.list" -}}
{{- $nsKey := "kyuubi.kubernetes.namespace" -}}
{{- $source := "" -}}{{- $init := "" -}}{{- $ns := "" -}}
{{- $confInit := index .Values.conf $initKey | default "" | toString -}}
{{- $confNs := index .Values.conf $nsKey | default "" | toString -}}
{{- $inlineInit := include "podsweep.propValue" (list .Values.kyuubiConf.inline $initKey) -}}
{{- $inlineNs := include "podsweep.propValue" (list .Values.kyuubiConf.inline $nsKey) -}}
{{- if or $confInit $confNs -}}
{{- $source = "conf" -}}{{- $init = $confInit -}}{{- $ns = $confNs | default $inlineNs -}}
{{- else if or $inlineInit $inlineNs -}}
{{- $source = "kyuubiConf.inline" -}}{{- $init = $inlineInit -}}{{- $ns = $inlineNs -}}
{{- end -}}
{{- $namespaces := list -}}{{- $withContext := list -}}
{{- if not $source -}}
{{- $namespaces = .Values.rbac.namespaces | default (list .Release.Namespace) -}}
source: rbac.namespaces
list: {{ $namespaces | join ",:" | printf ":%s" | quote }}
{{- else -}}
{{- if $init -}}
{{- range $entry := splitList "," $init -}}
{{- $e := trim $entry -}}
{{- if $e -}}
{{- $parts := splitList ":" $e -}}
{{- $ctx := index $parts 0 -}}
{{- $n := "" -}}
{{- if gt (len $parts) 1 -}}{{- $n = index $parts 1 -}}{{- end -}}
{{- if not $n -}}{{- $n = $ns -}}{{- end -}}
{{- if not $n -}}
{{- fail (printf "%s (in %s): the entry %q names no namespace and %s is not set: the daemons would not know which namespace to clean" $initKey $source $e $nsKey) -}}
{{- end -}}
{{- if $ctx -}}
{{- $withContext = append $withContext (printf "%s:%s" $ctx $n) -}}
{{- else -}}
{{- $namespaces = append $namespaces $n -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $namespaces = list $ns -}}
{{- end -}}
{{- $namespaces = $namespaces | uniq -}}
{{- if and .Values.rbac.namespaces (ne (.Values.rbac.namespaces | uniq | sortAlpha | join ",") ($namespaces | sortAlpha | join ",")) -}}
{{- fail (printf "rbac.namespaces (%s) and the scopes set in %s (%s) differ: set one of them" (.Values.rbac.namespaces | join ",") $source ($namespaces | join ",")) -}}
{{- end }}
source: {{ $source }}
list: ""
{{- end }}
namespaces: {{ $namespaces | toJson }}
withContext: {{ $withContext | toJson }}
{{- end -}}

{{/* The namespaces the Roles go to, space-separated. */}}
{{- define "podsweep.namespaces" -}}
{{- (include "podsweep.scopes" . | fromYaml).namespaces | join " " -}}
{{- end -}}

{{/* Whether the leader records Events (events.enabled, or the key in conf). */}}
{{- define "podsweep.events" -}}
{{- if or .Values.events.enabled (eq (include "podsweep.seenValue" (dict "Values" .Values "key" "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.events.enabled") | lower) "true") -}}
true
{{- end -}}
{{- end -}}

{{/*
The configuration arguments every podsweep command of the chart takes: the file, `conf`, the
scopes (unless set in conf or the inline text), Events, and single-server mode.
*/}}
{{- define "podsweep.confArgs" -}}
- --config
- /etc/kyuubi/conf/{{ .Values.kyuubiConf.key }}
{{- range $k, $v := .Values.conf }}
- --conf
- {{ printf "%s=%v" $k $v | quote }}
{{- end }}
{{- $scopes := include "podsweep.scopes" . | fromYaml }}
{{- if $scopes.list }}
- --conf
- {{ printf "kyuubi.kubernetes.client.initialize.list=%s" $scopes.list | quote }}
{{- end }}
{{- if .Values.events.enabled }}
- --conf
- kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.events.enabled=true
{{- end }}
{{- if eq .Values.coordination "single" }}
- --conf
- kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.singleServer=true
{{- end }}
{{- end -}}

{{/* Refusals of what cannot work, each saying why. */}}
{{- define "podsweep.checks" -}}
{{- $single := eq .Values.coordination "single" -}}
{{- if $single -}}
{{- if ne (int .Values.replicaCount) 1 -}}
{{- fail "coordination single: replicaCount must be 1 (without an HA backend two daemons would each delete every pod)" -}}
{{- end -}}
{{- else -}}
{{- if lt (int .Values.replicaCount) 2 -}}
{{- fail "replicaCount must be 2 or more with coordination ha: the daemons elect one leader per scope through Kyuubi's HA backend and the others stand by (for one daemon without an HA backend, set coordination: single)" -}}
{{- end -}}
{{- $addresses := include "podsweep.seenValue" (dict "Values" .Values "key" "kyuubi.ha.addresses") -}}
{{- $quorum := include "podsweep.seenValue" (dict "Values" .Values "key" "kyuubi.ha.zookeeper.quorum") -}}
{{- if and .Values.kyuubiConf.inline (not $addresses) (not $quorum) -}}
{{- fail "coordination ha: kyuubiConf.inline (and conf) set neither kyuubi.ha.addresses nor kyuubi.ha.zookeeper.quorum: without an HA backend every daemon would lead every scope on its own (for one daemon, set coordination: single and replicaCount: 1)" -}}
{{- end -}}
{{- $alone := include "podsweep.seenValue" (dict "Values" .Values "key" "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.singleServer") | lower -}}
{{- if eq $alone "true" -}}
{{- fail "coordination ha, but conf (or kyuubiConf.inline) sets ...ha.singleServer=true: set coordination: single instead, which also sets replicaCount's limit and the update strategy" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.kyuubiConf.inline .Values.kyuubiConf.secret -}}
{{- fail "kyuubiConf.inline and kyuubiConf.secret are both set: give the file one way" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled -}}
{{- fail "metrics.serviceMonitor and metrics.podMonitor are both enabled: each daemon would be scraped twice; enable one" -}}
{{- end -}}
{{- end -}}

{{/* What a test container shares with the daemon's: env, mounts, resources, security. */}}
{{- define "podsweep.testContainer" -}}
{{- with .Values.extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.envFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: kyuubi-conf
    mountPath: /etc/kyuubi/conf
    readOnly: true
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}
