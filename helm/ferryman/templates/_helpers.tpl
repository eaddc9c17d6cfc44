{{- define "ferryman.fullname" -}}
{{- printf "%s-ferryman" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "ferryman.labels" -}}
app.kubernetes.io/name: ferryman
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "router") */}}
{{- define "ferryman.selector" -}}
app.kubernetes.io/name: ferryman
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ferryman.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "ferryman.secretName" -}}
{{ include "ferryman.fullname" . }}-config
{{- end -}}

{{/* env every Ferryman container gets */}}
{{- define "ferryman.env" -}}
- name: FERRYMAN_DATA_DIR
  value: /tmp/ferryman
- name: FERRYMAN_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- if .Values.trustedProxies }}
- name: FERRYMAN_TRUSTED_PROXIES
  value: {{ join "," .Values.trustedProxies | quote }}
{{- end }}
- name: FERRYMAN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret | default (include "ferryman.secretName" .) }}
      key: {{ .Values.database.secretKey }}
{{- if or .Values.redis.url .Values.redis.existingSecret (include "ferryman.bundledRedis" .) }}
- name: FERRYMAN_QUOTA_BACKEND
  value: redis
- name: FERRYMAN_QUOTA_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret | default (include "ferryman.secretName" .) }}
      key: {{ .Values.redis.secretKey }}
{{- end }}
- name: FERRYMAN_SERVICE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.serviceToken.existingSecret | default (printf "%s-service-token" (include "ferryman.fullname" .)) }}
      key: {{ .Values.serviceToken.secretKey }}
{{- if .Values.tls.existingSecret }}
- name: FERRYMAN_TLS_CERT
  value: /etc/ferryman/tls/tls.crt
- name: FERRYMAN_TLS_KEY
  value: /etc/ferryman/tls/tls.key
- name: FERRYMAN_TLS_CA
  value: /etc/ferryman/tls/ca.crt
- name: FERRYMAN_TLS_CLIENT_AUTH
  value: {{ .Values.tls.clientAuth | quote }}
{{- end }}
{{- if .Values.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.otlpEndpoint | quote }}
{{- if .Values.otlpMetrics }}
- name: OTEL_METRICS_EXPORTER
  value: otlp
{{- end }}
{{- end }}
{{- end -}}

{{- define "ferryman.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* writable scratch for a read-only root filesystem */}}
{{- define "ferryman.tmpVolume" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
{{- end }}
{{- end -}}
{{- define "ferryman.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.existingSecret }}
- name: tls
  mountPath: /etc/ferryman/tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* Readiness on grpc.health.v1 (NOT_SERVING while starting or draining takes the pod
out of endpoints at once); liveness on the port alone, so a drain is never cut short. */}}
{{/* (dict "root" $ "port" 7001) */}}
{{- define "ferryman.probes" -}}
readinessProbe:
  {{- if .root.Values.tls.existingSecret }}
  tcpSocket:
    port: {{ .port }}
  {{- else }}
  grpc:
    port: {{ .port }}
  {{- end }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  tcpSocket:
    port: {{ .port }}
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/* The headless Service naming every batcher pod (routers resolve it: router/discovery.py). */}}
{{- define "ferryman.batcherPods" -}}
{{ include "ferryman.fullname" . }}-batcher-pods
{{- end -}}

{{- define "ferryman.batcherAddress" -}}
{{ include "ferryman.batcherPods" . }}:{{ .Values.batcher.port }}
{{- end -}}

{{/* "true" when the chart runs its own PostgreSQL: enabled and no database given. */}}
{{- define "ferryman.bundledPostgresql" -}}
{{- if and .Values.postgresql.enabled (not .Values.database.url) (not .Values.database.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the chart runs its own Redis: enabled and no Redis given. */}}
{{- define "ferryman.bundledRedis" -}}
{{- if and .Values.redisServer.enabled (not .Values.redis.url) (not .Values.redis.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The ingress rule of a metrics port: only the monitoring selector's pods scrape it (the
router's carry per-tenant figures). */}}
{{- define "ferryman.metricsIngress" -}}
- from:
    - namespaceSelector:
        {{- toYaml .Values.networkPolicy.monitoring.namespaceSelector | nindent 8 }}
      podSelector:
        {{- toYaml .Values.networkPolicy.monitoring.podSelector | nindent 8 }}
  ports:
    - port: metrics
{{- end -}}

{{/* One quota store or none: quota counters and idempotency live in Redis, or in one process's
memory. Several quota replicas (or several routers hosting quotas in-process) without Redis
would each count alone, silently splitting every tenant's limits: refused at render. */}}
{{- define "ferryman.oneQuotaStore" -}}
{{- if not (or .Values.redis.url .Values.redis.existingSecret (include "ferryman.bundledRedis" .)) -}}
{{- if and .Values.quota.enabled (gt (int .Values.quota.replicas) 1) -}}
{{- fail "quota.replicas > 1 needs Redis (redis.url, redis.existingSecret or redisServer.enabled): each replica would keep its own counters, splitting every tenant's limits" -}}
{{- end -}}
{{- $routers := int .Values.router.replicas -}}
{{- if .Values.router.autoscaling.enabled -}}{{- $routers = max $routers (int .Values.router.autoscaling.maxReplicas) -}}{{- end -}}
{{- if and (not .Values.quota.enabled) (gt $routers 1) -}}
{{- fail "routers hosting quotas in-process (quota.enabled false) need Redis when there can be more than one: each would keep its own counters, splitting every tenant's limits" -}}
{{- end -}}
{{- end -}}
{{- end -}}
