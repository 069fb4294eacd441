{
  "annotations": {},
  "description": "KV admission signals across every vLLM pod, from the recording rules; worst pods first.",
  "editable": true,
  "fiscalYearStartMonth": 0,
  "graphTooltip": 1,
  "links": [
    {
      "asDropdown": false,
      "icon": "",
      "includeVars": true,
      "keepTime": true,
      "tags": [
        "vllm-headroom"
      ],
      "targetBlank": false,
      "title": "vLLM / KV admission",
      "tooltip": "",
      "type": "dashboards"
    },
    {
      "asDropdown": false,
      "icon": "",
      "includeVars": false,
      "keepTime": false,
      "tags": [],
      "targetBlank": true,
      "title": "Runbook",
      "tooltip": "",
      "type": "link",
      "url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}"
    }
  ],
  "panels": [
    {
      "collapsed": false,
      "gridPos": {
        "h": 1,
        "w": 24,
        "x": 0,
        "y": 0
      },
      "id": 1,
      "panels": [],
      "title": "Fleet now",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Engines whose requests wait while the KV cache has room. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 0,
        "y": 1
      },
      "id": 2,
      "options": {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {
          "calcs": [
            "lastNotNull"
          ],
          "values": false
        },
        "showPercentChange": false,
        "textMode": "auto",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_false_full:bool{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}))",
          "legendFormat": "false-full",
          "refId": "A"
        }
      ],
      "title": "Engines false-full",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Engines whose requests wait for KV blocks. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 4,
        "y": 1
      },
      "id": 3,
      "options": {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {
          "calcs": [
            "lastNotNull"
          ],
          "values": false
        },
        "showPercentChange": false,
        "textMode": "auto",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_full:bool{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}))",
          "legendFormat": "kv-full",
          "refId": "A"
        }
      ],
      "title": "Engines KV-full",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Free over usable blocks, all engines. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "unit": "percentunit"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 8,
        "y": 1
      },
      "id": 4,
      "options": {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {
          "calcs": [
            "lastNotNull"
          ],
          "values": false
        },
        "showPercentChange": false,
        "textMode": "auto",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_free_blocks:sub{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"})) / (sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_free_blocks:sub{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"})) + sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_used_blocks:round{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"})))",
          "legendFormat": "free",
          "refId": "A"
        }
      ],
      "title": "Free KV blocks",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Sum of vllm:num_requests_waiting.",
      "fieldConfig": {
        "defaults": {
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 12,
        "y": 1
      },
      "id": 5,
      "options": {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {
          "calcs": [
            "lastNotNull"
          ],
          "values": false
        },
        "showPercentChange": false,
        "textMode": "auto",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_num_requests_waiting:max{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}))",
          "legendFormat": "waiting",
          "refId": "A"
        }
      ],
      "title": "Waiting requests",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "All engines (a pod scraped by two jobs counts once). From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 16,
        "y": 1
      },
      "id": 6,
      "options": {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {
          "calcs": [
            "lastNotNull"
          ],
          "values": false
        },
        "showPercentChange": false,
        "textMode": "auto",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum(model_name:vllm_num_preemptions:rate5m{cluster=~\"$cluster\",namespace=~\"$namespace\",model_name=~\"$model_name\"})",
          "legendFormat": "preemptions/s",
          "refId": "A"
        }
      ],
      "title": "Preemptions / s",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Engines reporting vllm:num_requests_running.",
      "fieldConfig": {
        "defaults": {
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 20,
        "y": 1
      },
      "id": 7,
      "options": {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "reduceOptions": {
          "calcs": [
            "lastNotNull"
          ],
          "values": false
        },
        "showPercentChange": false,
        "textMode": "auto",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "count(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_num_requests_running:max{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}))",
          "legendFormat": "engines",
          "refId": "A"
        }
      ],
      "title": "Engines",
      "transparent": false,
      "type": "stat"
    },
    {
      "collapsed": false,
      "gridPos": {
        "h": 1,
        "w": 24,
        "x": 0,
        "y": 6
      },
      "id": 8,
      "panels": [],
      "title": "Worst pods first",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "One row per engine, sorted by safe headroom (requests that still fit if all run to max_tokens; negative = preemption ahead). From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {
            "align": "auto",
            "inspect": false
          }
        },
        "overrides": []
      },
      "gridPos": {
        "h": 10,
        "w": 24,
        "x": 0,
        "y": 7
      },
      "id": 9,
      "options": {
        "cellHeight": "sm",
        "footer": {
          "countRows": false,
          "reducer": [],
          "show": false
        },
        "frameIndex": 0,
        "showHeader": true,
        "showTypeIcons": false
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_safe_headroom_requests:floor{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "A",
          "range": false,
          "refId": "A"
        },
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_kv_false_full:bool{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "B",
          "range": false,
          "refId": "B"
        },
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_kv_usage_ratio:max{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "C",
          "range": false,
          "refId": "C"
        },
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_num_requests_waiting:max{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "D",
          "range": false,
          "refId": "D"
        },
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_kv_free_blocks:sub{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "E",
          "range": false,
          "refId": "E"
        },
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_worst_case_blocks_per_request:ceil{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "F",
          "range": false,
          "refId": "F"
        },
        {
          "expr": "max by (cluster, who, model_name, engine) (label_replace(label_join(instance_engine:vllm_preemptions_per_request:ratio5m{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "G",
          "range": false,
          "refId": "G"
        }
      ],
      "title": "Engines by safe headroom (worst first)",
      "transformations": [
        {
          "id": "merge",
          "options": {}
        },
        {
          "id": "organize",
          "options": {
            "excludeByName": {
              "Time": true
            },
            "renameByName": {}
          }
        },
        {
          "id": "organize",
          "options": {
            "renameByName": {
              "Value #A": "safe headroom",
              "Value #B": "false-full",
              "Value #C": "KV usage (panel)",
              "Value #D": "waiting",
              "Value #E": "free blocks",
              "Value #F": "W (blocks/request)",
              "Value #G": "preemptions/request",
              "who": "pod (or instance)"
            }
          }
        },
        {
          "id": "sortBy",
          "options": {
            "sort": [
              {
                "desc": false,
                "field": "safe headroom"
              }
            ]
          }
        }
      ],
      "transparent": false,
      "type": "table"
    },
    {
      "collapsed": false,
      "gridPos": {
        "h": 1,
        "w": 24,
        "x": 0,
        "y": 17
      },
      "id": 10,
      "panels": [],
      "title": "Over time",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 0,
        "y": 18
      },
      "id": 11,
      "options": {
        "legend": {
          "calcs": [],
          "displayMode": "table",
          "placement": "bottom",
          "showLegend": true
        },
        "tooltip": {
          "mode": "multi",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum by (model_name) (max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_false_full:bool{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}))",
          "legendFormat": "{{`{{model_name}}`}}",
          "refId": "A"
        }
      ],
      "title": "False-full engines by model",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Worst engines first. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 12,
        "y": 18
      },
      "id": 12,
      "options": {
        "legend": {
          "calcs": [],
          "displayMode": "table",
          "placement": "bottom",
          "showLegend": true
        },
        "tooltip": {
          "mode": "multi",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "bottomk(10, label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_safe_headroom_requests:floor{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "legendFormat": "{{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "A"
        }
      ],
      "title": "Lowest safe headroom (10 engines)",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "vllm:num_requests_waiting.",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 0,
        "y": 26
      },
      "id": 13,
      "options": {
        "legend": {
          "calcs": [],
          "displayMode": "table",
          "placement": "bottom",
          "showLegend": true
        },
        "tooltip": {
          "mode": "multi",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "topk(10, label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_num_requests_waiting:max{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "legendFormat": "{{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "A"
        }
      ],
      "title": "Most waiting requests (10 engines)",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 12,
        "y": 26
      },
      "id": 14,
      "options": {
        "legend": {
          "calcs": [],
          "displayMode": "table",
          "placement": "bottom",
          "showLegend": true
        },
        "tooltip": {
          "mode": "multi",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum by (model_name) (model_name:vllm_kv_free_blocks:sum{cluster=~\"$cluster\",namespace=~\"$namespace\",model_name=~\"$model_name\"})",
          "legendFormat": "free {{`{{model_name}}`}}",
          "refId": "A"
        },
        {
          "expr": "sum by (model_name) (model_name:vllm_kv_capacity_blocks:sum{cluster=~\"$cluster\",namespace=~\"$namespace\",model_name=~\"$model_name\"})",
          "legendFormat": "usable {{`{{model_name}}`}}",
          "refId": "B"
        }
      ],
      "title": "Free KV blocks by model",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 0,
        "y": 34
      },
      "id": 15,
      "options": {
        "legend": {
          "calcs": [],
          "displayMode": "table",
          "placement": "bottom",
          "showLegend": true
        },
        "tooltip": {
          "mode": "multi",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "topk(10, label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_num_preemptions:rate5m{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",model_name=~\"$model_name\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "legendFormat": "{{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "A"
        }
      ],
      "title": "Preemptions / s (10 engines)",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 12,
        "y": 34
      },
      "id": 16,
      "options": {
        "legend": {
          "calcs": [],
          "displayMode": "table",
          "placement": "bottom",
          "showLegend": true
        },
        "tooltip": {
          "mode": "multi",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "sum(model_name:vllm_kv_false_full_engines:sum{cluster=~\"$cluster\",namespace=~\"$namespace\",model_name=~\"$model_name\"})",
          "legendFormat": "false-full",
          "refId": "A"
        },
        {
          "expr": "sum(model_name:vllm_kv_full_engines:sum{cluster=~\"$cluster\",namespace=~\"$namespace\",model_name=~\"$model_name\"})",
          "legendFormat": "kv-full",
          "refId": "B"
        }
      ],
      "title": "Engines false-full or KV-full",
      "transparent": false,
      "type": "timeseries"
    }
  ],
  "refresh": "1m",
  "schemaVersion": 39,
  "tags": [
    "vllm",
    "vllm-headroom",
    "kv-cache"
  ],
  "templating": {
    "list": [
      {
        "includeAll": false,
        "label": "Data source",
        "multi": false,
        "name": "datasource",
        "query": "prometheus",
        "skipUrlSync": false,
        "type": "datasource"
      },
      {
        "allValue": ".*",
        "datasource": {
          "type": "prometheus",
          "uid": "${datasource}"
        },
        "description": "cluster label of a global view (Thanos, Mimir); none on one Prometheus: All matches.",
        "includeAll": true,
        "label": "Cluster",
        "multi": true,
        "name": "cluster",
        "query": "label_values(vllm:num_requests_running, cluster)",
        "refresh": 2,
        "skipUrlSync": false,
        "sort": 1,
        "type": "query"
      },
      {
        "allValue": ".*",
        "datasource": {
          "type": "prometheus",
          "uid": "${datasource}"
        },
        "description": "Kubernetes namespace of the vLLM pods (empty outside Kubernetes: All matches).",
        "includeAll": true,
        "label": "Namespace",
        "multi": true,
        "name": "namespace",
        "query": "label_values(vllm:num_requests_running{cluster=~\"$cluster\"}, namespace)",
        "refresh": 2,
        "skipUrlSync": false,
        "sort": 1,
        "type": "query"
      },
      {
        "allValue": ".*",
        "datasource": {
          "type": "prometheus",
          "uid": "${datasource}"
        },
        "description": "Prometheus job scraping vLLM; with All, a pod scraped by two jobs counts once.",
        "includeAll": true,
        "label": "Job",
        "multi": true,
        "name": "job",
        "query": "label_values(vllm:num_requests_running{cluster=~\"$cluster\",namespace=~\"$namespace\"}, job)",
        "refresh": 2,
        "skipUrlSync": false,
        "sort": 1,
        "type": "query"
      },
      {
        "allValue": ".*",
        "datasource": {
          "type": "prometheus",
          "uid": "${datasource}"
        },
        "description": "model_name label of vLLM's series (served model name).",
        "includeAll": true,
        "label": "Model",
        "multi": true,
        "name": "model_name",
        "query": "label_values(vllm:num_requests_running{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\"}, model_name)",
        "refresh": 2,
        "skipUrlSync": false,
        "sort": 1,
        "type": "query"
      }
    ]
  },
  "time": {
    "from": "now-6h",
    "to": "now"
  },
  "timezone": "browser",
  "title": "vLLM / KV fleet",
  "uid": "vllm-kv-fleet"
}
