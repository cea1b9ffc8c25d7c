{{/* Names, labels and the pieces every portal pod shares. */}}

{{- define "gpu-pool-portal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or the release name when it already contains the chart name; fullnameOverride wins. */}}
{{- define "gpu-pool-portal.fullname" -}}
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

{{- define "gpu-pool-portal.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component: pass (dict "root" $ "component" "web"). */}}
{{- define "gpu-pool-portal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-pool-portal.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* All labels of an object: pass (dict "root" $ "component" "web"); component may be empty. */}}
{{- define "gpu-pool-portal.labels" -}}
helm.sh/chart: {{ include "gpu-pool-portal.chart" .root }}
{{ include "gpu-pool-portal.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpu-pool-portal
{{- end -}}

{{/* The service account of one process kind: pass (dict "root" $ "component" "web"); component "" is the account of
     the pods that call no cluster (beat, migrations). Each kind has its own (clusters/kube_sync/access.py). */}}
{{- define "gpu-pool-portal.serviceAccountName" -}}
{{- $root := .root -}}
{{- if $root.Values.serviceAccount.create -}}
{{- $base := default (include "gpu-pool-portal.fullname" $root) $root.Values.serviceAccount.name -}}
{{- if .component }}{{ printf "%s-%s" $base .component }}{{ else }}{{ $base }}{{ end -}}
{{- else -}}
{{- default "default" $root.Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpu-pool-portal.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* The Secret the chart creates for inline secret values. */}}
{{- define "gpu-pool-portal.secretName" -}}
{{- printf "%s-secrets" (include "gpu-pool-portal.fullname" .) -}}
{{- end -}}

{{/*
The secret settings: environment variable, the values block it is configured in, the inline field, and whether
the portal cannot start without it. One list, read by the Secret, the pods' env and the checks.
*/}}
{{- define "gpu-pool-portal.secretSettings" -}}
- env: SECRET_KEY
  block: secretKey
  field: value
  required: true
- env: DATABASE_URL
  block: database
  field: url
  required: true
- env: CELERY_BROKER_URL
  block: broker
  field: url
  required: true
- env: METRICS_TOKEN
  block: metrics
  field: token
  required: false
- env: CACHE_URL
  block: cache
  field: url
  required: false
{{- if .Values.oidc.enabled }}
- env: OIDC_CLIENT_SECRET
  block: oidc
  field: clientSecret
  required: true
{{- end }}
{{- end -}}

{{/*
Where one secret setting is read from, as YAML {name, key, optional} ({} when nowhere and not required):
its own existingSecret, else the chart's Secret when an inline value is given, else the shared existingSecret.
Pass (dict "root" $ "setting" <one entry of secretSettings>).
*/}}
{{- define "gpu-pool-portal.secretRef" -}}
{{- $root := .root -}}
{{- $s := .setting -}}
{{- $block := index $root.Values $s.block -}}
{{- if $block.existingSecret -}}
name: {{ $block.existingSecret }}
key: {{ $block.existingSecretKey | default $s.env }}
optional: false
{{- else if index $block $s.field -}}
name: {{ include "gpu-pool-portal.secretName" $root }}
key: {{ $s.env }}
optional: false
{{- else if $root.Values.existingSecret -}}
name: {{ $root.Values.existingSecret }}
key: {{ $s.env }}
optional: {{ not $s.required }}
{{- else if $s.required -}}
{{- fail (printf "%s: set %s.%s, %s.existingSecret or existingSecret" $s.env $s.block $s.field $s.block) -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* The inline secret values the chart's Secret holds, as YAML {ENV: value}. */}}
{{- define "gpu-pool-portal.inlineSecrets" -}}
{{- $root := . -}}
{{- $out := dict -}}
{{- range (include "gpu-pool-portal.secretSettings" $root | fromYamlArray) -}}
{{- $block := index $root.Values .block -}}
{{- if and (not $block.existingSecret) (index $block .field) -}}
{{- $_ := set $out .env (index $block .field) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The environment of every portal container: the ConfigMap, then each secret setting from its Secret. */}}
{{- define "gpu-pool-portal.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "gpu-pool-portal.fullname" . }}-config
env:
{{- range (include "gpu-pool-portal.secretSettings" . | fromYamlArray) }}
{{- $ref := include "gpu-pool-portal.secretRef" (dict "root" $ "setting" .) | fromYaml }}
{{- if $ref.name }}
  - name: {{ .env }}
    valueFrom:
      secretKeyRef:
        name: {{ $ref.name }}
        key: {{ $ref.key }}
        {{- if $ref.optional }}
        optional: true
        {{- end }}
{{- end }}
{{- end }}
{{- range .Values.extraSecretEnv }}
  - name: {{ .name }}
    valueFrom:
      secretKeyRef:
        name: {{ .secretName }}
        key: {{ .key }}
{{- end }}
{{- end -}}

{{/* Pod template annotations: a change of the settings or of the chart's Secret rolls the pods. */}}
{{- define "gpu-pool-portal.podAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include "gpu-pool-portal.inlineSecrets" . | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod-level fields every portal pod shares. */}}
{{- define "gpu-pool-portal.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The writable volumes of the read-only root filesystem, and their mounts. */}}
{{- define "gpu-pool-portal.volumeMounts" -}}
volumeMounts:
  - name: var
    mountPath: /app/var
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{- define "gpu-pool-portal.volumes" -}}
- name: var
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* A container of the portal's image: pass (dict "root" $ "name" "web" "command" (list …) "resources" {…}). */}}
{{- define "gpu-pool-portal.container" -}}
- name: {{ .name }}
  image: {{ include "gpu-pool-portal.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command:
    {{- toYaml .command | nindent 4 }}
  {{- include "gpu-pool-portal.env" .root | nindent 2 }}
  resources:
    {{- toYaml .resources | nindent 4 }}
  securityContext:
    {{- toYaml .root.Values.securityContext | nindent 4 }}
  {{- include "gpu-pool-portal.volumeMounts" .root | nindent 2 }}
{{- end -}}

{{/* The init container that waits until the release's migrations are applied. */}}
{{- define "gpu-pool-portal.waitForMigrations" -}}
{{- $command := list "sh" "-c" "until python manage.py migrate --check; do echo waiting for migrations; sleep 5; done" -}}
{{ include "gpu-pool-portal.container" (dict "root" . "name" "wait-for-migrations" "command" $command "resources" .Values.initResources) }}
{{- end -}}

{{/* Every ALLOWED_HOSTS entry: allowedHosts or the ingress hosts, and localhost. */}}
{{- define "gpu-pool-portal.allowedHosts" -}}
{{- $hosts := list -}}
{{- if .Values.allowedHosts -}}
{{- $hosts = .Values.allowedHosts -}}
{{- else if .Values.ingress.enabled -}}
{{- range .Values.ingress.hosts -}}
{{- $hosts = append $hosts .host -}}
{{- end -}}
{{- end -}}
{{- append $hosts "localhost" | uniq | join "," -}}
{{- end -}}

{{- define "gpu-pool-portal.csrfTrustedOrigins" -}}
{{- if .Values.csrfTrustedOrigins -}}
{{- join "," .Values.csrfTrustedOrigins -}}
{{- else -}}
{{- $origins := list -}}
{{- range (include "gpu-pool-portal.allowedHosts" . | splitList ",") -}}
{{- if ne . "localhost" -}}
{{- $origins = append $origins (printf "https://%s" .) -}}
{{- end -}}
{{- end -}}
{{- join "," $origins -}}
{{- end -}}
{{- end -}}

{{/* nodeHealth.managedNodeLabels as HEALTH_MANAGED_NODE_LABELS reads it: k=v,k2=v2 (sorted). */}}
{{- define "gpu-pool-portal.nodeLabels" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.nodeHealth.managedNodeLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- required "nodeHealth.managedNodeLabels: name at least one label of the nodes the portal may touch" ($pairs | join ",") -}}
{{- end -}}
