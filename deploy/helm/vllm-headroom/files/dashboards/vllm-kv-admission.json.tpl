{
  "annotations": {},
  "description": "Why vLLM requests wait: KV usage as the panel shows it next to real admission headroom.",
  "editable": true,
  "fiscalYearStartMonth": 0,
  "graphTooltip": 1,
  "links": [
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
    },
    {
      "asDropdown": false,
      "icon": "",
      "includeVars": true,
      "keepTime": true,
      "tags": [
        "vllm-headroom"
      ],
      "targetBlank": false,
      "title": "vLLM / KV fleet",
      "tooltip": "",
      "type": "dashboards"
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
      "title": "Now",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Why requests wait now, by the sidecar's verdict (colour by severity). Needs the vllm-headroom sidecar (vllm_headroom_* metrics).",
      "fieldConfig": {
        "defaults": {
          "mappings": [
            {
              "options": {
                "budget_full": {
                  "color": "yellow",
                  "index": 9,
                  "text": "budget_full"
                },
                "deferred": {
                  "color": "yellow",
                  "index": 5,
                  "text": "deferred"
                },
                "head_of_line": {
                  "color": "yellow",
                  "index": 4,
                  "text": "head_of_line"
                },
                "kv_full": {
                  "color": "orange",
                  "index": 1,
                  "text": "kv_full"
                },
                "leak": {
                  "color": "orange",
                  "index": 7,
                  "text": "leak"
                },
                "never_fits": {
                  "color": "dark-red",
                  "index": 10,
                  "text": "never_fits"
                },
                "ok": {
                  "color": "green",
                  "index": 0,
                  "text": "ok"
                },
                "preempting": {
                  "color": "red",
                  "index": 3,
                  "text": "preempting"
                },
                "sleeping": {
                  "color": "blue",
                  "index": 12,
                  "text": "sleeping"
                },
                "slots_full": {
                  "color": "yellow",
                  "index": 2,
                  "text": "slots_full"
                },
                "stuck": {
                  "color": "dark-red",
                  "index": 6,
                  "text": "stuck"
                },
                "target_down": {
                  "color": "dark-red",
                  "index": 8,
                  "text": "target_down"
                },
                "transient": {
                  "color": "light-blue",
                  "index": 11,
                  "text": "transient"
                },
                "undecided": {
                  "color": "light-blue",
                  "index": 13,
                  "text": "undecided"
                }
              },
              "type": "value"
            }
          ],
          "unit": "short"
        },
        "overrides": [
          {
            "matcher": {
              "id": "byName",
              "options": "ok"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "green",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "kv_full"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "orange",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "slots_full"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "preempting"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "head_of_line"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "deferred"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "stuck"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "dark-red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "leak"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "orange",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "target_down"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "dark-red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "budget_full"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "never_fits"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "dark-red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "transient"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "light-blue",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "sleeping"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "blue",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "undecided"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "light-blue",
                  "mode": "fixed"
                }
              }
            ]
          }
        ]
      },
      "gridPos": {
        "h": 5,
        "w": 4,
        "x": 0,
        "y": 1
      },
      "id": 2,
      "options": {
        "colorMode": "background",
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
        "textMode": "name",
        "wideLayout": true
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "max by (verdict) (vllm_headroom_verdict{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}) > 0",
          "legendFormat": "{{`{{verdict}}`}}",
          "refId": "A"
        }
      ],
      "title": "Verdict",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Requests wait while the KV cache has room. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed); the sidecar's held flag is vllm_headroom_false_full.",
      "fieldConfig": {
        "defaults": {
          "mappings": [
            {
              "options": {
                "0": {
                  "color": "green",
                  "text": "no"
                },
                "1": {
                  "color": "red",
                  "text": "YES"
                }
              },
              "type": "value"
            }
          ],
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
        "colorMode": "background",
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
          "expr": "max(instance_engine:vllm_kv_false_full:bool{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "false-full",
          "refId": "A"
        }
      ],
      "title": "False-full",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Requests vLLM would admit now: min(max_num_seqs − running, floor(free / prompt blocks)). Needs the vllm-headroom sidecar (vllm_headroom_* metrics) (max_num_seqs is in no vLLM metric).",
      "fieldConfig": {
        "defaults": {
          "thresholds": {
            "mode": "absolute",
            "steps": [
              {
                "color": "red",
                "value": null
              },
              {
                "color": "yellow",
                "value": 1
              },
              {
                "color": "green",
                "value": 4
              }
            ]
          },
          "unit": "short"
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
        "colorMode": "background",
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
          "expr": "min(vllm_headroom_admission_headroom_requests{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "admission headroom",
          "refId": "A"
        }
      ],
      "title": "Admission headroom",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "KV usage as vLLM reports it and the share of the pool a new worst-case request cannot get now (vllm_headroom_unreachable_pool_ratio, which replaces the deprecated effective_usage_ratio), with the limit that binds (slots: max_num_seqs; blocks: KV). 1 with slots binding is not a full KV cache. Threshold at the full-usage setting. Panel: vLLM's metric; unreachable and binding limit: Needs the vllm-headroom sidecar (vllm_headroom_* metrics).",
      "fieldConfig": {
        "defaults": {
          "max": 1,
          "min": 0,
          "thresholds": {
            "mode": "absolute",
            "steps": [
              {
                "color": "green",
                "value": null
              },
              {
                "color": "red",
                "value": {{ .Values.thresholds.fullUsage }}
              }
            ]
          },
          "unit": "percentunit"
        },
        "overrides": [
          {
            "matcher": {
              "id": "byFrameRefID",
              "options": "C"
            },
            "properties": [
              {
                "id": "unit",
                "value": "none"
              },
              {
                "id": "mappings",
                "value": [
                  {
                    "options": {
                      "1": {
                        "color": "blue",
                        "text": "binds"
                      }
                    },
                    "type": "value"
                  }
                ]
              }
            ]
          }
        ]
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
          "expr": "max(instance_engine:vllm_kv_usage_ratio:max{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "panel",
          "refId": "A"
        },
        {
          "expr": "max(vllm_headroom_unreachable_pool_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "unreachable",
          "refId": "B"
        },
        {
          "expr": "max by (limit) (vllm_headroom_binding_limit{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}) > 0",
          "legendFormat": "binding limit: {{`{{limit}}`}}",
          "refId": "C"
        }
      ],
      "title": "KV usage (panel) vs unreachable pool",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Running requests / max_num_seqs. Needs the vllm-headroom sidecar (vllm_headroom_* metrics) (max_num_seqs comes from vLLM's command line).",
      "fieldConfig": {
        "defaults": {
          "max": 1,
          "min": 0,
          "thresholds": {
            "mode": "absolute",
            "steps": [
              {
                "color": "green",
                "value": null
              },
              {
                "color": "orange",
                "value": 0.9
              },
              {
                "color": "red",
                "value": 1
              }
            ]
          },
          "unit": "percentunit"
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
          "expr": "sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_requests_running{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"})) / sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_max_num_seqs{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}))",
          "legendFormat": "slots used",
          "refId": "A"
        }
      ],
      "title": "max_num_seqs slots used",
      "transparent": false,
      "type": "stat"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "vllm:num_requests_waiting (vLLM's own metric).",
      "fieldConfig": {
        "defaults": {
          "thresholds": {
            "mode": "absolute",
            "steps": [
              {
                "color": "green",
                "value": null
              },
              {
                "color": "orange",
                "value": 1
              }
            ]
          },
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
          "expr": "sum(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_num_requests_waiting:max{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}))",
          "legendFormat": "waiting",
          "refId": "A"
        }
      ],
      "title": "Waiting requests",
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
      "title": "What the panel says vs what admission sees",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Left axis, counts that stay readable on any pool size: requests waiting, admission headroom (requests vLLM would admit now; Needs the vllm-headroom sidecar (vllm_headroom_* metrics)), worst-case blocks one request holds and safe headroom in requests. Right axis: KV usage as the usual panel shows it, with the full-usage threshold. Free blocks are in their own panel below. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {
            "axisLabel": "requests · blocks per request"
          },
          "unit": "short"
        },
        "overrides": [
          {
            "matcher": {
              "id": "byFrameRefID",
              "options": "A"
            },
            "properties": [
              {
                "id": "unit",
                "value": "percentunit"
              },
              {
                "id": "min",
                "value": 0
              },
              {
                "id": "max",
                "value": 1
              },
              {
                "id": "custom.axisPlacement",
                "value": "right"
              },
              {
                "id": "custom.axisLabel",
                "value": "KV usage (panel)"
              },
              {
                "id": "custom.thresholdsStyle",
                "value": {
                  "mode": "dashed"
                }
              },
              {
                "id": "thresholds",
                "value": {
                  "mode": "absolute",
                  "steps": [
                    {
                      "color": "green",
                      "value": null
                    },
                    {
                      "color": "red",
                      "value": {{ .Values.thresholds.fullUsage }}
                    }
                  ]
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byFrameRefID",
              "options": "E"
            },
            "properties": [
              {
                "id": "custom.lineStyle",
                "value": {
                  "dash": [
                    10,
                    10
                  ],
                  "fill": "dash"
                }
              }
            ]
          }
        ]
      },
      "gridPos": {
        "h": 10,
        "w": 24,
        "x": 0,
        "y": 7
      },
      "id": 9,
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
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_usage_ratio:max{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "KV usage (panel) {{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "A"
        },
        {
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_num_requests_waiting:max{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "waiting {{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "B"
        },
        {
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_admission_headroom_requests{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "admission headroom {{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "C"
        },
        {
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_worst_case_blocks_per_request:ceil{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "worst-case blocks/request {{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "D"
        },
        {
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_safe_headroom_requests:floor{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "safe headroom (requests) {{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "E"
        }
      ],
      "title": "Waiting vs admission headroom vs worst-case blocks per request, KV usage %",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Free blocks next to the usable pool, per engine. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
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
        "y": 17
      },
      "id": 10,
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
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_free_blocks:sub{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "free {{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "A"
        },
        {
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_kv_capacity_blocks:usable{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "usable {{`{{who}}`}} engine {{`{{engine}}`}}",
          "refId": "B"
        }
      ],
      "title": "Free and usable KV blocks",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "The symptom beside the cause: how long finished requests waited in vLLM's queue (vllm:request_queue_time_seconds) and their time to first token (vllm:time_to_first_token_seconds). Both are observed when a request finishes or starts streaming.",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "s"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 12,
        "y": 17
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
          "expr": "histogram_quantile(0.5, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:request_queue_time_seconds_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "queue time p50",
          "refId": "A"
        },
        {
          "expr": "histogram_quantile(0.99, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:request_queue_time_seconds_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "queue time p99",
          "refId": "B"
        },
        {
          "expr": "histogram_quantile(0.5, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:time_to_first_token_seconds_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "TTFT p50",
          "refId": "C"
        },
        {
          "expr": "histogram_quantile(0.99, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:time_to_first_token_seconds_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "TTFT p99",
          "refId": "D"
        }
      ],
      "title": "Queue time and time to first token (p50, p99)",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "collapsed": false,
      "gridPos": {
        "h": 1,
        "w": 24,
        "x": 0,
        "y": 25
      },
      "id": 12,
      "panels": [],
      "title": "Over time",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "The sidecar's verdict per scrape (ok, kv_full, slots_full, preempting, head_of_line, deferred, stuck, leak, target_down, budget_full, never_fits, transient, sleeping, undecided), coloured by severity; below it, the limit that binds a new request (slots or blocks). Needs the vllm-headroom sidecar (vllm_headroom_* metrics).",
      "fieldConfig": {
        "defaults": {
          "custom": {
            "fillOpacity": 70,
            "lineWidth": 0
          },
          "mappings": [
            {
              "options": {
                "budget_full": {
                  "color": "yellow",
                  "index": 9,
                  "text": "budget_full"
                },
                "deferred": {
                  "color": "yellow",
                  "index": 5,
                  "text": "deferred"
                },
                "head_of_line": {
                  "color": "yellow",
                  "index": 4,
                  "text": "head_of_line"
                },
                "kv_full": {
                  "color": "orange",
                  "index": 1,
                  "text": "kv_full"
                },
                "leak": {
                  "color": "orange",
                  "index": 7,
                  "text": "leak"
                },
                "never_fits": {
                  "color": "dark-red",
                  "index": 10,
                  "text": "never_fits"
                },
                "ok": {
                  "color": "green",
                  "index": 0,
                  "text": "ok"
                },
                "preempting": {
                  "color": "red",
                  "index": 3,
                  "text": "preempting"
                },
                "sleeping": {
                  "color": "blue",
                  "index": 12,
                  "text": "sleeping"
                },
                "slots_full": {
                  "color": "yellow",
                  "index": 2,
                  "text": "slots_full"
                },
                "stuck": {
                  "color": "dark-red",
                  "index": 6,
                  "text": "stuck"
                },
                "target_down": {
                  "color": "dark-red",
                  "index": 8,
                  "text": "target_down"
                },
                "transient": {
                  "color": "light-blue",
                  "index": 11,
                  "text": "transient"
                },
                "undecided": {
                  "color": "light-blue",
                  "index": 13,
                  "text": "undecided"
                }
              },
              "type": "value"
            }
          ]
        },
        "overrides": [
          {
            "matcher": {
              "id": "byName",
              "options": "ok"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "green",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "kv_full"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "orange",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "slots_full"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "preempting"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "head_of_line"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "deferred"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "stuck"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "dark-red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "leak"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "orange",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "target_down"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "dark-red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "budget_full"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "never_fits"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "dark-red",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "transient"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "light-blue",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "sleeping"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "blue",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "undecided"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "light-blue",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "slots"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "yellow",
                  "mode": "fixed"
                }
              }
            ]
          },
          {
            "matcher": {
              "id": "byName",
              "options": "blocks"
            },
            "properties": [
              {
                "id": "color",
                "value": {
                  "fixedColor": "orange",
                  "mode": "fixed"
                }
              }
            ]
          }
        ]
      },
      "gridPos": {
        "h": 6,
        "w": 24,
        "x": 0,
        "y": 26
      },
      "id": 13,
      "options": {
        "alignValue": "left",
        "legend": {
          "calcs": [],
          "displayMode": "list",
          "placement": "bottom",
          "showLegend": false
        },
        "mergeValues": true,
        "rowHeight": 0.9,
        "showValue": "never",
        "tooltip": {
          "mode": "single",
          "sort": "asc"
        }
      },
      "repeatDirection": "h",
      "targets": [
        {
          "expr": "max by (verdict) (vllm_headroom_verdict{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}) > 0",
          "legendFormat": "{{`{{verdict}}`}}",
          "refId": "A"
        },
        {
          "expr": "max by (limit) (vllm_headroom_binding_limit{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}) > 0",
          "legendFormat": "{{`{{limit}}`}}",
          "refId": "B"
        }
      ],
      "title": "Verdict over time",
      "transparent": false,
      "type": "state-timeline"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "vLLM's preemptions over finished requests (5 m; over running requests while none finishes): a ratio, so it means the same at 0.2 and at 50 requests/s. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "thresholds": {
            "mode": "absolute",
            "steps": [
              {
                "color": "green",
                "value": null
              },
              {
                "color": "red",
                "value": {{ .Values.prometheusRule.preemptionRatio }}
              }
            ]
          },
          "unit": "percentunit"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 12,
        "x": 0,
        "y": 32
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
          "expr": "label_replace(label_join(max by (cluster, namespace, instance, pod, container, target, model_name, engine) (instance_engine:vllm_preemptions_per_request:ratio5m{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}), \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\")",
          "legendFormat": "{{`{{who}}`}} {{`{{model_name}}`}} engine {{`{{engine}}`}}",
          "refId": "A"
        }
      ],
      "title": "Preemptions per finished request",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Quantiles of finished requests' prompt and max_tokens (vLLM's histograms, observed at finish), and the bucket-bound p99 the worst-case math uses. From the recording rules in deploy/prometheus (vLLM's own metrics; no sidecar needed).",
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
        "y": 32
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
          "expr": "histogram_quantile(0.5, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:request_prompt_tokens_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "prompt p50",
          "refId": "A"
        },
        {
          "expr": "histogram_quantile(0.99, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:request_prompt_tokens_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "prompt p99",
          "refId": "B"
        },
        {
          "expr": "histogram_quantile(0.5, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:request_params_max_tokens_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "max_tokens p50",
          "refId": "C"
        },
        {
          "expr": "histogram_quantile(0.99, sum by (le) (max by (cluster, namespace, instance, pod, container, target, model_name, engine, le) (rate(vllm:request_params_max_tokens_bucket{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"}[$__rate_interval]))))",
          "legendFormat": "max_tokens p99",
          "refId": "D"
        },
        {
          "expr": "max(instance_engine:vllm_request_prompt_tokens:bucket_quantile{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "prompt (worst-case profile)",
          "refId": "E"
        },
        {
          "expr": "max(instance_engine:vllm_request_max_tokens:bucket_quantile{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",job=~\"$job\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "max_tokens (worst-case profile)",
          "refId": "F"
        }
      ],
      "title": "Request profile (tokens)",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "What KEDA or an HPA at AverageValue 1 scales to (deploy/autoscaling, on the recording rule model_name:vllm_headroom_replicas_needed:sum): ceil of the sum over the selected replicas of the offered load L (the running count's time-average over the load window x max(1, arrived / admitted), at least the window's arrivals still waiting) / (min(max_num_seqs, floor(blocks / worst-case blocks per request)) x the target utilization); beside it the replicas reporting it and those held at one because max_num_seqs is unknown (state it to let them scale down). Needs the vllm-headroom sidecar (vllm_headroom_* metrics).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "short"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 24,
        "x": 0,
        "y": 40
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
          "expr": "ceil(sum by (model_name) (max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_replicas_needed{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\"})))",
          "legendFormat": "needed {{`{{model_name}}`}}",
          "refId": "A"
        },
        {
          "expr": "count by (model_name) (max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_replicas_needed_basis{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\"}))",
          "legendFormat": "replicas {{`{{model_name}}`}}",
          "refId": "B"
        },
        {
          "expr": "sum by (model_name) (max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_replicas_needed_basis{conservative=\"true\",cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\"}) or max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_replicas_needed_basis{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\"}) * 0)",
          "legendFormat": "held {{`{{model_name}}`}}",
          "refId": "C"
        }
      ],
      "title": "Replicas needed (replica signal)",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "collapsed": false,
      "gridPos": {
        "h": 1,
        "w": 24,
        "x": 0,
        "y": 48
      },
      "id": 17,
      "panels": [],
      "title": "Capacity ledger",
      "type": "row"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Per engine: usable blocks, block size, tokens, max_model_len, max_num_seqs, max concurrency at the worst case W and at max_model_len, the share of used blocks' token slots that hold no token (with its high bound; empty while nothing runs) and the prefix cache's hit share, and where each config value came from (flag, vllm_args, cmdline, cache_config_info, v1_models). Needs the vllm-headroom sidecar (vllm_headroom_* metrics): max_model_len, max_num_seqs and provenance are in no vLLM metric. Capacity alone from vLLM's metrics: instance_engine:vllm_kv_capacity_blocks:usable.",
      "fieldConfig": {
        "defaults": {
          "custom": {
            "align": "auto",
            "inspect": false
          }
        },
        "overrides": [
          {
            "matcher": {
              "id": "byFrameRefID",
              "options": "I"
            },
            "properties": [
              {
                "id": "unit",
                "value": "percentunit"
              },
              {
                "id": "decimals",
                "value": 1
              }
            ]
          },
          {
            "matcher": {
              "id": "byFrameRefID",
              "options": "J"
            },
            "properties": [
              {
                "id": "unit",
                "value": "percentunit"
              },
              {
                "id": "decimals",
                "value": 1
              }
            ]
          },
          {
            "matcher": {
              "id": "byFrameRefID",
              "options": "K"
            },
            "properties": [
              {
                "id": "unit",
                "value": "percentunit"
              },
              {
                "id": "decimals",
                "value": 1
              }
            ]
          }
        ]
      },
      "gridPos": {
        "h": 8,
        "w": 24,
        "x": 0,
        "y": 49
      },
      "id": 18,
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
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_kv_capacity_blocks{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "A",
          "range": false,
          "refId": "A"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_block_size_tokens{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "B",
          "range": false,
          "refId": "B"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_kv_capacity_tokens{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "C",
          "range": false,
          "refId": "C"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_max_num_seqs{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "D",
          "range": false,
          "refId": "D"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_worst_case_blocks_per_request{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",basis=\"profile\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "E",
          "range": false,
          "refId": "E"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_max_concurrency_requests{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",basis=\"profile\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "F",
          "range": false,
          "refId": "F"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_max_concurrency_requests{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",basis=\"max_model_len\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "G",
          "range": false,
          "refId": "G"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_kv_block_waste_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",bound=\"estimate\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "I",
          "range": false,
          "refId": "I"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_kv_block_waste_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",bound=\"high\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "J",
          "range": false,
          "refId": "J"
        },
        {
          "expr": "max by (who, model_name, engine) (label_replace(label_join(vllm_headroom_prefix_cache_hit_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "K",
          "range": false,
          "refId": "K"
        },
        {
          "expr": "max by (who, model_name, engine, max_model_len, max_model_len_source, max_num_seqs_source, num_gpu_blocks_source, block_size_source) (label_replace(label_join(vllm_headroom_config_info{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"}, \"who\", \"/\", \"namespace\", \"pod\", \"instance\"), \"who\", \"$1$2\", \"who\", \"[^/]*//(.*)|/?([^/]*/?[^/]+)/[^/]*\"))",
          "format": "table",
          "instant": true,
          "legendFormat": "H",
          "range": false,
          "refId": "H"
        }
      ],
      "title": "Capacity ledger",
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
            "excludeByName": {
              "Value #H": true
            },
            "renameByName": {
              "Value #A": "usable blocks",
              "Value #B": "block size",
              "Value #C": "tokens",
              "Value #D": "max_num_seqs",
              "Value #E": "W (blocks/request)",
              "Value #F": "max concurrency at W",
              "Value #G": "max concurrency at max_model_len",
              "Value #I": "empty slots of used blocks",
              "Value #J": "empty slots, at most",
              "Value #K": "prefix cache hits",
              "who": "pod (or instance)"
            }
          }
        }
      ],
      "transparent": false,
      "type": "table"
    },
    {
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"
      },
      "description": "Share of the token slots in used KV blocks that hold no token, with its range: vLLM's usage gauge counts whole blocks, so a request one token into a block holds all of it (17-token prompts at block 16 fill 2 blocks, 53 % of their slots). The share of prompt tokens the prefix cache served, and at most how much of a prompt a shared prefix loses at its last partial block (only full blocks are cached). Needs the vllm-headroom sidecar (vllm_headroom_* metrics).",
      "fieldConfig": {
        "defaults": {
          "custom": {},
          "unit": "percentunit"
        },
        "overrides": []
      },
      "gridPos": {
        "h": 8,
        "w": 24,
        "x": 0,
        "y": 57
      },
      "id": 19,
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
          "expr": "max(vllm_headroom_kv_block_waste_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",bound=\"estimate\"})",
          "legendFormat": "empty slots of used blocks",
          "refId": "A"
        },
        {
          "expr": "max(vllm_headroom_kv_block_waste_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",bound=\"low\"})",
          "legendFormat": "empty slots, low",
          "refId": "B"
        },
        {
          "expr": "max(vllm_headroom_kv_block_waste_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",bound=\"high\"})",
          "legendFormat": "empty slots, high",
          "refId": "C"
        },
        {
          "expr": "max(vllm_headroom_prefix_cache_hit_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\"})",
          "legendFormat": "prefix cache hits",
          "refId": "D"
        },
        {
          "expr": "max(vllm_headroom_prefix_cache_boundary_loss_ratio{cluster=~\"$cluster\",namespace=~\"$namespace\",pod=~\"$pod\",model_name=~\"$model_name\",engine=~\"$engine\",bound=\"high\"})",
          "legendFormat": "prefix lost at a partial block, at most",
          "refId": "E"
        }
      ],
      "title": "Block waste and the prefix cache",
      "transparent": false,
      "type": "timeseries"
    },
    {
      "gridPos": {
        "h": 5,
        "w": 24,
        "x": 0,
        "y": 65
      },
      "id": 20,
      "options": {
        "content": "Alerts and what to do: [runbook]({{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}). False-full: [{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvfalsefull]({{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvfalsefull). Panels marked *needs the sidecar* stay empty without vllm-headroom next to the pod; everything else comes from vLLM's own metrics through the recording rules in `deploy/prometheus/`.",
        "mode": "markdown"
      },
      "repeatDirection": "h",
      "title": "Runbook",
      "transparent": false,
      "type": "text"
    }
  ],
  "refresh": "30s",
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
        "description": "The vLLM pod; filters vLLM's series and its sidecar's alike (outside Kubernetes: All).",
        "includeAll": true,
        "label": "Pod",
        "multi": true,
        "name": "pod",
        "query": "label_values(vllm:num_requests_running{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\"}, pod)",
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
        "query": "label_values(vllm:num_requests_running{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",pod=~\"$pod\"}, model_name)",
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
        "description": "Data-parallel engine index.",
        "includeAll": true,
        "label": "Engine",
        "multi": true,
        "name": "engine",
        "query": "label_values(vllm:num_requests_running{cluster=~\"$cluster\",namespace=~\"$namespace\",job=~\"$job\",pod=~\"$pod\",model_name=~\"$model_name\"}, engine)",
        "refresh": 2,
        "skipUrlSync": false,
        "sort": 1,
        "type": "query"
      }
    ]
  },
  "time": {
    "from": "now-1h",
    "to": "now"
  },
  "timezone": "browser",
  "title": "vLLM / KV admission",
  "uid": "vllm-kv-admission"
}
