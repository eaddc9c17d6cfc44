{{/*
A Ferryman service Deployment.
(dict "root" $ "component" "router" "values" .Values.router "args" (list ...) "port" 7001 "grpc" true)
Optional "http" (a port number): the container also serves HTTP there (port name http).
"grpc" false: the main port speaks HTTP (named http), and the container serves no metrics.
*/}}
{{- define "ferryman.deployment" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "ferryman.fullname" $root }}-{{ .component }}
  labels:
    {{- include "ferryman.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if not (and .values.autoscaling .values.autoscaling.enabled) }}
  replicas: {{ .values.replicas | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "ferryman.selector" (dict "root" $root "component" .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "ferryman.selector" (dict "root" $root "component" .component) | nindent 8 }}
    spec:
      {{- include "ferryman.podSecurity" $root | nindent 6 }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "ferryman.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "ferryman.env" $root | nindent 12 }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: {{ if .grpc }}grpc{{ else }}http{{ end }}
              containerPort: {{ .port }}
            {{- if .grpc }}
            - name: metrics
              containerPort: {{ $root.Values.metricsPort }}
            {{- end }}
            {{- if .http }}
            - name: http
              containerPort: {{ .http }}
            {{- end }}
          {{- if .grpc }}
          {{- include "ferryman.probes" (dict "root" $root "port" .port) | nindent 10 }}
          {{- else }}
          readinessProbe:
            httpGet: {path: /_stcore/health, port: {{ .port }}}
            periodSeconds: 5
          livenessProbe:
            httpGet: {path: /_stcore/health, port: {{ .port }}}
            initialDelaySeconds: 15
            periodSeconds: 10
          {{- end }}
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "ferryman.tmpMount" $root | nindent 12 }}
      volumes:
        {{- include "ferryman.tmpVolume" $root | nindent 8 }}
{{- end -}}

{{/* (dict "root" $ "component" "router" "port" 7001 "type" "ClusterIP"), optional "http" port;
"web" true: the port speaks HTTP (named http) and no metrics port is served (the console). */}}
{{- define "ferryman.service" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "ferryman.fullname" .root }}-{{ .component }}
  labels:
    {{- include "ferryman.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  type: {{ .type | default "ClusterIP" }}
  selector:
    {{- include "ferryman.selector" (dict "root" .root "component" .component) | nindent 4 }}
  ports:
    {{- $name := ternary "http" "grpc" (eq .web true) }}
    - name: {{ $name }}
      port: {{ .port }}
      targetPort: {{ $name }}
      {{- if .appProtocol }}
      appProtocol: {{ .appProtocol }}
      {{- end }}
    {{- if not .web }}
    - name: metrics
      port: {{ .root.Values.metricsPort }}
      targetPort: metrics
    {{- end }}
    {{- if .http }}
    - name: http
      port: {{ .http }}
      targetPort: http
      appProtocol: http
    {{- end }}
{{- end -}}

{{/* (dict "root" $ "component" "router" "values" .Values.router) */}}
{{- define "ferryman.hpa" -}}
{{- if and .values.autoscaling .values.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "ferryman.fullname" .root }}-{{ .component }}
  labels:
    {{- include "ferryman.labels" .root | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "ferryman.fullname" .root }}-{{ .component }}
  minReplicas: {{ .values.autoscaling.minReplicas }}
  maxReplicas: {{ .values.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .values.autoscaling.targetCPUUtilizationPercentage }}
{{- end }}
{{- end -}}

{{/* (dict "root" $ "component" "router" "values" .Values.router) */}}
{{- define "ferryman.pdb" -}}
{{- if and .values.pdb .values.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "ferryman.fullname" .root }}-{{ .component }}
  labels:
    {{- include "ferryman.labels" .root | nindent 4 }}
spec:
  {{- if hasKey .values.pdb "maxUnavailable" }}
  maxUnavailable: {{ .values.pdb.maxUnavailable }}
  {{- else }}
  minAvailable: {{ .values.pdb.minAvailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "ferryman.selector" (dict "root" .root "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}
