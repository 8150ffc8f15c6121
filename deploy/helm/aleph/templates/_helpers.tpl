{{- define "aleph.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .group.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "aleph.labels" -}}
app.kubernetes.io/name: aleph
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .group.name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "aleph.selector" -}}
app.kubernetes.io/name: aleph
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .group.name }}
{{- end -}}

{{- define "aleph.secretName" -}}
{{- if .Values.apiKey.existingSecret -}}{{ .Values.apiKey.existingSecret }}{{- else -}}{{ printf "%s-api-key" .Release.Name }}{{- end -}}
{{- end -}}

{{- define "aleph.adminSecretName" -}}
{{- if .Values.adminKey.existingSecret -}}{{ .Values.adminKey.existingSecret }}{{- else -}}{{ printf "%s-admin-key" .Release.Name }}{{- end -}}
{{- end -}}

{{- define "aleph.keyFileSecretName" -}}
{{- if .Values.apiKeyFile.existingSecret -}}{{ .Values.apiKeyFile.existingSecret }}{{- else -}}{{ printf "%s-api-keys" .Release.Name }}{{- end -}}
{{- end -}}
