{{/* Labels Helm's conventions add to every object, beside those of manifests/. */}}
{{- define "gantry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
An image reference from (dict "root" $ "image" .Values.<component>.image): the repository with
image.registry in front, then @digest if given, else :tag (image.tag, or the appVersion).
*/}}
{{- define "gantry.image" -}}
{{- $repository := .image.repository -}}
{{- with .root.Values.image.registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.root.Values.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end }}
