{
  "apiVersion": "monitoring.coreos.com/v1",
  "kind": "PrometheusRule",
  "metadata": {
    "annotations": {
      "vllm-headroom/runbook-base-url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}"
    },
    "labels": {
      "app.kubernetes.io/component": "monitoring",
      "app.kubernetes.io/name": "vllm-headroom",
      "prometheus": "k8s",
      "role": "alert-rules"
    },
    "name": "vllm-headroom"
  },
  "spec": {
    "groups": [
      {
        "interval": "1m",
        "name": "vllm-headroom.profile.rules",
        "rules": [
          {
            "expr": "((histogram_quantile(1, (max by (cluster, namespace, job, instance, pod, container, model_name, engine, le) (vllm:request_prompt_tokens_bucket - min_over_time(vllm:request_prompt_tokens_bucket[{{ include "vllm-headroom.jsonString" .Values.profile.window }}]))\n/ ignoring (le) group_left ()\nmax by (cluster, namespace, job, instance, pod, container, model_name, engine) (vllm:request_prompt_tokens_bucket{le=\"+Inf\"} - min_over_time(vllm:request_prompt_tokens_bucket{le=\"+Inf\"}[{{ include "vllm-headroom.jsonString" .Values.profile.window }}]))) >= bool {{ .Values.profile.quantile }}) > 0)\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info)\nor (instance_engine:vllm_request_prompt_tokens_observed:bucket_quantile and on (job, instance) (up == 0) and on (job, instance)\ngroup by (job, instance) (last_over_time(vllm:num_requests_running[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))",
            "record": "instance_engine:vllm_request_prompt_tokens_observed:bucket_quantile"
          },
          {
            "expr": "((histogram_quantile(1, (max by (cluster, namespace, job, instance, pod, container, model_name, engine, le) (vllm:request_params_max_tokens_bucket - min_over_time(vllm:request_params_max_tokens_bucket[{{ include "vllm-headroom.jsonString" .Values.profile.window }}]))\n/ ignoring (le) group_left ()\nmax by (cluster, namespace, job, instance, pod, container, model_name, engine) (vllm:request_params_max_tokens_bucket{le=\"+Inf\"} - min_over_time(vllm:request_params_max_tokens_bucket{le=\"+Inf\"}[{{ include "vllm-headroom.jsonString" .Values.profile.window }}]))) >= bool {{ .Values.profile.quantile }}) > 0)\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info)\nor (instance_engine:vllm_request_max_tokens_observed:bucket_quantile and on (job, instance) (up == 0) and on (job, instance)\ngroup by (job, instance) (last_over_time(vllm:num_requests_running[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))",
            "record": "instance_engine:vllm_request_max_tokens_observed:bucket_quantile"
          }
        ]
      },
      {
        "name": "vllm-headroom.engine.rules",
        "rules": [
          {
            "expr": "(up == 0) + 1\nand on (job, instance)\ngroup by (job, instance) (last_over_time(vllm:num_requests_running[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]))",
            "record": "instance:vllm_scrape_failing:bool"
          },
          {
            "expr": "(label_replace(group by (cluster, namespace, job, instance, pod, container) (vllm:num_requests_running), \"vllm_endpoint\", \"$1\", \"instance\", \"(.*?)(?::(?:80|443))?\"))\nor (instance:vllm_endpoint:info and on (job, instance) instance:vllm_scrape_failing:bool)",
            "record": "instance:vllm_endpoint:info"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:num_requests_running[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_num_requests_running:max"
          },
          {
            "expr": "max_over_time(instance_engine:vllm_num_requests_running:max[5m])",
            "record": "instance_engine:vllm_num_requests_running:max_over_time5m"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:num_requests_waiting[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_num_requests_waiting:max"
          },
          {
            "expr": "instance_engine:vllm_num_requests_waiting:max\n- on (cluster, namespace, job, instance, pod, container, model_name, engine) group_left ()\nmax by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:num_requests_waiting_by_reason{reason=\"deferred\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]))\nor instance_engine:vllm_num_requests_waiting:max",
            "record": "instance_engine:vllm_num_requests_waiting_schedulable:max"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:kv_cache_usage_perc[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]))\nor max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:gpu_cache_usage_perc[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_kv_usage_ratio:max"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (max_over_time(vllm:kv_cache_usage_perc[5m]))\nor max by (cluster, namespace, job, instance, pod, container, model_name, engine) (max_over_time(vllm:gpu_cache_usage_perc[5m])))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_kv_usage_ratio:max_over_time5m"
          },
          {
            "expr": "clamp_min(round(instance_engine:vllm_kv_usage_ratio:max * ignoring (model_name) group_left () instance_engine:vllm_kv_capacity_blocks:usable\n+ instance_engine:vllm_kv_usage_ratio:max * instance_engine:vllm_kv_usage_counts_null_block:bool)\n- instance_engine:vllm_kv_usage_counts_null_block:bool, 0)",
            "record": "instance_engine:vllm_kv_used_blocks:round"
          },
          {
            "expr": "clamp_min(instance_engine:vllm_kv_capacity_blocks:usable\n- ignoring (model_name) group_right ()\ninstance_engine:vllm_kv_used_blocks:round, 0)",
            "record": "instance_engine:vllm_kv_free_blocks:sub"
          },
          {
            "expr": "instance_engine:vllm_request_prompt_tokens_observed:bucket_quantile\nor instance_engine:vllm_request_tokens:max_bucket",
            "record": "instance_engine:vllm_request_prompt_tokens:bucket_quantile"
          },
          {
            "expr": "instance_engine:vllm_request_max_tokens_observed:bucket_quantile\nor instance_engine:vllm_request_tokens:max_bucket",
            "record": "instance_engine:vllm_request_max_tokens:bucket_quantile"
          },
          {
            "expr": "clamp_min(ceil(instance_engine:vllm_request_prompt_tokens_observed:bucket_quantile\n/ ignoring (model_name) group_left ()\ninstance_engine:vllm_block_size_tokens:max), 1)",
            "record": "instance_engine:vllm_prompt_blocks_observed:ceil"
          },
          {
            "expr": "clamp_min(ceil(instance_engine:vllm_request_prompt_tokens:bucket_quantile\n/ ignoring (model_name) group_left ()\ninstance_engine:vllm_block_size_tokens:max), 1)",
            "record": "instance_engine:vllm_prompt_blocks:ceil"
          },
          {
            "expr": "clamp_min(ceil(((instance_engine:vllm_request_prompt_tokens:bucket_quantile + instance_engine:vllm_request_max_tokens:bucket_quantile)\n<= instance_engine:vllm_request_tokens:max_bucket\nor instance_engine:vllm_request_tokens:max_bucket)\n/ ignoring (model_name) group_left ()\ninstance_engine:vllm_block_size_tokens:max), 1)",
            "record": "instance_engine:vllm_worst_case_blocks_per_request:ceil"
          },
          {
            "expr": "floor((instance_engine:vllm_kv_used_blocks:round + instance_engine:vllm_kv_free_blocks:sub\n- ((instance_engine:vllm_kv_used_blocks:round > instance_engine:vllm_num_requests_running:max * instance_engine:vllm_worst_case_blocks_per_request:ceil) or instance_engine:vllm_num_requests_running:max * instance_engine:vllm_worst_case_blocks_per_request:ceil))\n/ instance_engine:vllm_worst_case_blocks_per_request:ceil)",
            "record": "instance_engine:vllm_safe_headroom_requests:floor"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (rate(vllm:num_preemptions_total[5m])))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_num_preemptions:rate5m"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (sum without (finished_reason) (rate(vllm:request_success_total[5m]))))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_request_success:rate5m"
          },
          {
            "expr": "(instance_engine:vllm_num_preemptions:rate5m\n/ (instance_engine:vllm_request_success:rate5m > 0))\nor (instance_engine:vllm_num_preemptions:rate5m * 300\n/ (instance_engine:vllm_num_requests_running:max_over_time5m > 0))",
            "record": "instance_engine:vllm_preemptions_per_request:ratio5m"
          },
          {
            "expr": "((max by (cluster, namespace, job, instance, pod, container, model_name, engine) (rate(vllm:iteration_tokens_total_count[5m]))\nor max by (cluster, namespace, job, instance, pod, container, model_name, engine) (rate(vllm:generation_tokens_total[5m]))))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_engine_steps:rate5m"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:engine_sleep_state{sleep_state!=\"awake\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_engine_asleep:bool"
          },
          {
            "expr": "instance_engine:vllm_kv_free_blocks:sub >= bool instance_engine:vllm_prompt_blocks_observed:ceil\nor (instance_engine:vllm_kv_free_blocks:sub * 0 + 1 and instance_engine:vllm_request_tokens:max_bucket)",
            "record": "instance_engine:vllm_prompt_fits:bool"
          },
          {
            "expr": "(instance_engine:vllm_kv_usage_ratio:max_over_time5m >= bool {{ .Values.thresholds.fullUsage }})\n+ (instance_engine:vllm_num_preemptions:rate5m > bool 0) > bool 0",
            "record": "instance_engine:vllm_kv_pressure:bool"
          },
          {
            "expr": "(instance_engine:vllm_num_requests_waiting:max > bool 0) * (1 - instance_engine:vllm_kv_pressure:bool) * instance_engine:vllm_prompt_fits:bool",
            "record": "instance_engine:vllm_kv_false_full:bool"
          },
          {
            "expr": "(instance_engine:vllm_num_requests_waiting:max > bool 0)\n* ((instance_engine:vllm_kv_pressure:bool + (1 - instance_engine:vllm_prompt_fits:bool) > bool 0) or instance_engine:vllm_kv_pressure:bool)",
            "record": "instance_engine:vllm_kv_full:bool"
          },
          {
            "expr": "((instance_engine:vllm_num_requests_waiting_schedulable:max > 0)\nand (instance_engine:vllm_engine_steps:rate5m == 0)\nunless (instance_engine:vllm_engine_asleep:bool > 0)) * 0 + 1",
            "record": "instance_engine:vllm_stuck:bool"
          },
          {
            "expr": "max without (job, instance, container) (\ninstance_engine:vllm_preemptions_per_request:ratio5m >= {{ .Values.prometheusRule.preemptionRatio }}\nand instance_engine:vllm_num_preemptions:rate5m * 300 >= {{ .Values.prometheusRule.stormMinPreemptions }})",
            "record": "endpoint_engine:vllm_preemption_storm:bool"
          }
        ]
      },
      {
        "interval": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.configInterval }}",
        "name": "vllm-headroom.config.rules",
        "rules": [
          {
            "expr": "max by (cluster, namespace, pod, vllm_endpoint, model_name, engine) (\n(last_over_time(vllm_headroom_kv_capacity_blocks[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]))\n* on (cluster, job, instance, target) group_left (vllm_endpoint) instance_target:vllm_headroom_endpoint:info)",
            "record": "endpoint_engine:vllm_headroom_kv_capacity_blocks:max"
          },
          {
            "expr": "max by (cluster, namespace, pod, vllm_endpoint, model_name, engine) (\n(last_over_time(vllm_headroom_block_size_tokens[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]))\n* on (cluster, job, instance, target) group_left (vllm_endpoint) instance_target:vllm_headroom_endpoint:info)",
            "record": "endpoint_engine:vllm_headroom_block_size_tokens:max"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, engine, block_size, num_gpu_blocks) (\nlast_over_time(vllm:cache_config_info{engine!=\"\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])\nor last_over_time(vllm:cache_config_info{engine=\"\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]) and on (cluster, namespace, job, instance, pod, container) instance_engine:vllm_num_requests_running:max{engine=\"\"}\nor label_replace(last_over_time(vllm:cache_config_info{engine=\"\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]) and on (cluster, namespace, job, instance, pod, container) instance_engine:vllm_num_requests_running:max{engine!=\"\"}, \"engine\", \"0\", \"\", \"\")))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_cache_config:info"
          },
          {
            "expr": "(histogram_quantile(1, max by (cluster, namespace, job, instance, pod, container, vllm_endpoint, engine, le) (\nlabel_replace(instance_engine:vllm_cache_config:info, \"le\", \"$1\", \"num_gpu_blocks\", \"([0-9]+)\") * 0\nor label_replace(instance_engine:vllm_cache_config:info, \"le\", \"+Inf\", \"\", \"\") * 0 + 1)) >= 0)\n/ on (cluster, namespace, job, instance, pod, container, vllm_endpoint) group_left ()\ncount without (engine) (max without (model_name) (instance_engine:vllm_num_requests_running:max))",
            "record": "instance_engine:vllm_num_gpu_blocks:per_engine"
          },
          {
            "expr": "(histogram_quantile(1, max by (cluster, namespace, job, instance, pod, container, vllm_endpoint, engine, le) (\nlabel_replace(instance_engine:vllm_cache_config:info, \"le\", \"$1\", \"block_size\", \"([0-9]+)\") * 0\nor label_replace(instance_engine:vllm_cache_config:info, \"le\", \"+Inf\", \"\", \"\") * 0 + 1)) >= 0)\nor max without (model_name) (instance_engine:vllm_num_requests_running:max * 0\n+ on (cluster, namespace, pod, vllm_endpoint, model_name, engine) group_left ()\n(endpoint_engine:vllm_headroom_block_size_tokens:max or label_replace(endpoint_engine:vllm_headroom_block_size_tokens:max, \"engine\", \"\", \"engine\", \"0\")))",
            "record": "instance_engine:vllm_block_size_tokens:max"
          },
          {
            "expr": "max without (model_name) (instance_engine:vllm_num_requests_running:max{engine!=\"\"}) * 0 + 1\nor max without (model_name) (instance_engine:vllm_num_requests_running:max{engine=\"\"}) * 0",
            "record": "instance_engine:vllm_null_block:bool"
          },
          {
            "expr": "(instance_engine:vllm_num_gpu_blocks:per_engine - instance_engine:vllm_null_block:bool)\nor max without (model_name) (instance_engine:vllm_num_requests_running:max * 0\n+ on (cluster, namespace, pod, vllm_endpoint, model_name, engine) group_left ()\n(endpoint_engine:vllm_headroom_kv_capacity_blocks:max or label_replace(endpoint_engine:vllm_headroom_kv_capacity_blocks:max, \"engine\", \"\", \"engine\", \"0\")))",
            "record": "instance_engine:vllm_kv_capacity_blocks:usable"
          },
          {
            "expr": "((max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:gpu_cache_usage_perc[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])) * 0 + 1\nor max by (cluster, namespace, job, instance, pod, container, model_name, engine) (last_over_time(vllm:kv_cache_usage_perc[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])) * 0))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info\n* ignoring (model_name) group_left ()\ninstance_engine:vllm_null_block:bool",
            "record": "instance_engine:vllm_kv_usage_counts_null_block:bool"
          },
          {
            "expr": "(histogram_quantile(1, max by (cluster, namespace, job, instance, pod, container, model_name, engine, le) (\nlast_over_time(vllm:request_prompt_tokens_bucket{le!=\"+Inf\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]) * 0\nor last_over_time(vllm:request_prompt_tokens_bucket{le=\"+Inf\"}[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]) * 0 + 1)))\n* on (cluster, job, instance) group_left (vllm_endpoint) instance:vllm_endpoint:info",
            "record": "instance_engine:vllm_request_tokens:max_bucket"
          },
          {
            "expr": "(instance_engine:vllm_num_requests_running:max * 0 + 1\nunless ignoring (model_name)\n(instance_engine:vllm_kv_capacity_blocks:usable and instance_engine:vllm_block_size_tokens:max))\nor instance_engine:vllm_num_requests_running:max * 0",
            "record": "instance_engine:vllm_kv_capacity_unknown:bool"
          }
        ]
      },
      {
        "name": "vllm-headroom.sidecar.rules",
        "rules": [
          {
            "expr": "(up == 0) + 1\nand on (job, instance)\ngroup by (job, instance) (last_over_time(vllm_headroom_up[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}]))",
            "record": "instance:vllm_headroom_scrape_failing:bool"
          },
          {
            "expr": "group by (cluster, namespace, job, instance, pod, container) (vllm_headroom_up)\nor (instance:vllm_headroom_sidecar:info and on (job, instance) up)",
            "record": "instance:vllm_headroom_sidecar:info"
          },
          {
            "expr": "(label_replace(label_replace(label_replace(\nlabel_replace(label_join(label_replace(group by (cluster, namespace, job, instance, pod, container, target) (vllm_headroom_up), \"vllm_endpoint\", \"$1\", \"target\", \"[A-Za-z][A-Za-z0-9+.-]*://([^/]+)(?:/.*)?\"), \"vllm_headroom_endpoint_tmp\", \"@\", \"vllm_endpoint\", \"instance\"), \"vllm_endpoint\", \"$1\", \"vllm_headroom_endpoint_tmp\", \"(?:localhost|127(?:\\\\.[0-9]+){3}|0\\\\.0\\\\.0\\\\.0|\\\\[::1\\\\])(?::[0-9]+)?@(.+)\"), \"vllm_endpoint\", \"${2}${1}\", \"vllm_headroom_endpoint_tmp\", \"(?:localhost|127(?:\\\\.[0-9]+){3}|0\\\\.0\\\\.0\\\\.0|\\\\[::1\\\\])(:[0-9]+)?@(.+?):[0-9]+\"), \"vllm_endpoint\", \"$1\", \"vllm_endpoint\", \"(.*?)(?::(?:80|443))?\"), \"vllm_headroom_endpoint_tmp\", \"\", \"vllm_headroom_endpoint_tmp\", \".*\"))\nor (instance_target:vllm_headroom_endpoint:info and on (job, instance) instance:vllm_headroom_scrape_failing:bool)",
            "record": "instance_target:vllm_headroom_endpoint:info"
          },
          {
            "expr": "time() - vllm_headroom_target_down_since_timestamp_seconds\nand on (cluster, job, instance, target) vllm_headroom_up == 0\nunless on (cluster, job, instance, target) increase(vllm_headroom_scrape_errors_total{reason=\"no_vllm_metrics\"}[5m]) > 0",
            "record": "instance_target:vllm_headroom_target_down:seconds"
          },
          {
            "expr": "((instance_target:vllm_headroom_endpoint:info\nand on (cluster, namespace, pod, vllm_endpoint) (instance:vllm_endpoint:info and on (job, instance) up == 1))\nor (instance_target:vllm_headroom_endpoint:info\nand on (namespace, pod, vllm_endpoint) (instance:vllm_endpoint:info{cluster=\"\"} and on (job, instance) up == 1))\nor (instance_target:vllm_headroom_endpoint:info\nand on (cluster, namespace, pod, vllm_endpoint) group by (namespace, pod, vllm_endpoint) (\n(instance:vllm_endpoint:info and on (job, instance) up == 1)))) * 0 + 1\nor instance_target:vllm_headroom_endpoint:info * 0",
            "record": "instance_target:vllm_headroom_vllm_scraped:bool"
          },
          {
            "expr": "(max by (cluster, namespace, job, instance, pod, container, target, model_name, engine) (last_over_time(vllm_headroom_requests_waiting[{{ include "vllm-headroom.jsonString" .Values.prometheusRule.scrapeGap }}])))\n* on (cluster, job, instance, target) group_left (vllm_endpoint) instance_target:vllm_headroom_endpoint:info",
            "record": "instance_target_engine:vllm_headroom_requests_waiting:max"
          },
          {
            "expr": "max without (job, instance, container, target) (instance_target_engine:vllm_headroom_requests_waiting:max)",
            "record": "endpoint_engine:vllm_headroom_requests_waiting:max"
          },
          {
            "expr": "max by (cluster, namespace, pod, vllm_endpoint, model_name, engine, verdict) (\n(avg_over_time(vllm_headroom_verdict[5m]) > 0)\n* on (cluster, job, instance, target) group_left (vllm_endpoint) instance_target:vllm_headroom_endpoint:info)",
            "record": "endpoint_engine:vllm_headroom_verdict:share5m"
          },
          {
            "expr": "((sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict!=\"target_down\"}) > 0.5)\nand endpoint_engine:vllm_headroom_requests_waiting:max)\nor label_replace((sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict!=\"target_down\"}) > 0.5)\nand endpoint_engine:vllm_headroom_requests_waiting:max, \"engine\", \"\", \"engine\", \"0\")",
            "record": "endpoint_engine:vllm_headroom_judged:bool"
          },
          {
            "expr": "max without (job, instance, container) (instance_engine:vllm_num_requests_running:max) * 0 + 1\nunless endpoint_engine:vllm_headroom_judged:bool\nunless on (namespace, pod, vllm_endpoint, model_name, engine) endpoint_engine:vllm_headroom_judged:bool{cluster=\"\"}\nunless on (cluster, namespace, pod, vllm_endpoint, model_name, engine) group by (namespace, pod, vllm_endpoint, model_name, engine) (\nendpoint_engine:vllm_headroom_judged:bool)",
            "record": "endpoint_engine:vllm_without_sidecar:bool"
          }
        ]
      },
      {
        "name": "vllm-headroom.fleet.rules",
        "rules": [
          {
            "expr": "sum by (cluster, namespace, model_name) (max without (job) (instance_engine:vllm_kv_used_blocks:round + instance_engine:vllm_kv_free_blocks:sub))",
            "record": "model_name:vllm_kv_capacity_blocks:sum"
          },
          {
            "expr": "sum by (cluster, namespace, model_name) (max without (job) (instance_engine:vllm_kv_free_blocks:sub))",
            "record": "model_name:vllm_kv_free_blocks:sum"
          },
          {
            "expr": "sum by (cluster, namespace, model_name) (max without (job) (instance_engine:vllm_num_requests_waiting:max))",
            "record": "model_name:vllm_num_requests_waiting:sum"
          },
          {
            "expr": "sum by (cluster, namespace, model_name) (max without (job) (instance_engine:vllm_kv_false_full:bool))",
            "record": "model_name:vllm_kv_false_full_engines:sum"
          },
          {
            "expr": "sum by (cluster, namespace, model_name) (max without (job) (instance_engine:vllm_kv_full:bool))",
            "record": "model_name:vllm_kv_full_engines:sum"
          },
          {
            "expr": "sum by (cluster, namespace, model_name) (max without (job) (instance_engine:vllm_num_preemptions:rate5m))",
            "record": "model_name:vllm_num_preemptions:rate5m"
          },
          {
            "expr": "sum by (cluster, namespace, model_name) (max by (cluster, namespace, instance, pod, container, target, model_name, engine) (vllm_headroom_replicas_needed))",
            "record": "model_name:vllm_headroom_replicas_needed:sum"
          }
        ]
      },
      {
        "name": "vllm-headroom.kv.alerts",
        "rules": [
          {
            "alert": "VLLMKVFalseFull",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests have waited 5 minutes beside free KV blocks (sidecar verdict deferred/head_of_line/slots_full held, else vLLM's series: usage under {{ .Values.thresholds.fullUsage }}, no preemption, the prompt fits).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvfalsefull",
              "summary": "vLLM requests wait although the KV cache has room (false-full)."
            },
            "expr": "endpoint_engine:vllm_headroom_requests_waiting:max > 0\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"deferred|head_of_line|slots_full\"}) > 0.5\nor max without (job, instance, container) (\n(instance_engine:vllm_num_requests_waiting:max\nand instance_engine:vllm_kv_false_full:bool == 1\nunless instance_engine:vllm_stuck:bool)\nunless instance_engine:vllm_engine_asleep:bool > 0)\nand endpoint_engine:vllm_without_sidecar:bool",
            "for": "5m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMKVCacheFull",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests have waited 10 minutes for KV blocks (sidecar verdict kv_full/preempting held, else vLLM's series: usage at {{ .Values.thresholds.fullUsage }}, a preemption, or the observed prompt does not fit). Add KV memory or replicas.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvcachefull",
              "summary": "vLLM's KV cache is truly full: requests wait for blocks."
            },
            "expr": "(endpoint_engine:vllm_headroom_requests_waiting:max > 0\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"kv_full|preempting\"}) > 0.5\nor max without (job, instance, container) (\n(instance_engine:vllm_num_requests_waiting:max and instance_engine:vllm_kv_full:bool == 1)\nunless instance_engine:vllm_engine_asleep:bool > 0)\nand endpoint_engine:vllm_without_sidecar:bool)\nunless endpoint_engine:vllm_preemption_storm:bool",
            "for": "10m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMPreemptionStorm",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanizePercentage }}`}} preemptions per finished (else running) request over 5m, at least {{ .Values.prometheusRule.stormMinPreemptions }}, for 5 minutes. Add KV memory or replicas.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmpreemptionstorm",
              "summary": "vLLM preempts a large share of its requests (KV thrash)."
            },
            "expr": "max without (job, instance, container) (instance_engine:vllm_preemptions_per_request:ratio5m)\nand endpoint_engine:vllm_preemption_storm:bool",
            "for": "5m",
            "labels": {
              "severity": "critical"
            }
          },
          {
            "alert": "VLLMKVOversubscribed",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): safe headroom {{`{{ $value | humanize }}`}} requests (a risk: running × worst case exceeds the pool) with usage at {{ .Values.thresholds.fullUsage }} or preemptions, for 15 minutes.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvoversubscribed",
              "summary": "vLLM's running requests may outgrow the KV pool, under pressure."
            },
            "expr": "max without (job, instance, container) (\n(instance_engine:vllm_safe_headroom_requests:floor < 0\nand instance_engine:vllm_kv_pressure:bool == 1\nunless instance_engine:vllm_kv_full:bool == 1)\nunless instance_engine:vllm_engine_asleep:bool > 0)\nunless endpoint_engine:vllm_preemption_storm:bool",
            "for": "15m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMKVOversubscribed",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): safe headroom {{`{{ $value | humanize }}`}} requests: a risk, no pressure yet (usage under {{ .Values.thresholds.fullUsage }}, no preemptions).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvoversubscribed",
              "summary": "vLLM over-commits its KV pool (normal; no pressure yet)."
            },
            "expr": "max without (job, instance, container) (\n(instance_engine:vllm_safe_headroom_requests:floor < 0\nunless instance_engine:vllm_kv_pressure:bool == 1)\nunless instance_engine:vllm_engine_asleep:bool > 0)",
            "for": "15m",
            "labels": {
              "severity": "info"
            }
          },
          {
            "alert": "VLLMHeadroomNeverFits",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests wait behind a head larger than the pool, for 2 minutes (sidecar verdict never_fits). Lower max_model_len to what the pool holds.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomneverfits",
              "summary": "vLLM's queue head needs more KV blocks than the pool: it never runs."
            },
            "expr": "endpoint_engine:vllm_headroom_requests_waiting:max > 0\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"never_fits\"}) > 0.5",
            "for": "2m",
            "labels": {
              "severity": "critical"
            }
          },
          {
            "alert": "VLLMHeadroomBudgetFull",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests have waited 10 minutes for the step token budget (sidecar verdict budget_full). Raise max_num_batched_tokens.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroombudgetfull",
              "summary": "vLLM's requests wait for the step token budget, not for KV."
            },
            "expr": "endpoint_engine:vllm_headroom_requests_waiting:max > 0\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"budget_full\"}) > 0.5",
            "for": "10m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMKVBlockLeak",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} KV blocks stayed in use for 15 minutes with nothing running or waiting (sidecar verdict leak held, else vLLM's series: its gauges).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvblockleak",
              "summary": "vLLM keeps KV blocks in use with no request running."
            },
            "expr": "max without (job, instance, container) (instance_engine:vllm_kv_used_blocks:round)\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"leak\"}) > 0.5\nor max without (job, instance, container) (\n(instance_engine:vllm_kv_used_blocks:round > 0\nand instance_engine:vllm_num_requests_running:max == 0\nand instance_engine:vllm_num_requests_waiting:max == 0)\nunless instance_engine:vllm_engine_asleep:bool > 0)\nand endpoint_engine:vllm_without_sidecar:bool",
            "for": "15m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMKVHistogramsMissing",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): no vllm:request_prompt_tokens_bucket for 15 minutes ({{`{{ $value | humanize }}`}} wait): no false-full or oversubscription without a sidecar. Keep the histograms in the scrape.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvhistogramsmissing",
              "summary": "vLLM's prompt-length histogram is not scraped."
            },
            "expr": "max without (job, instance, container) (\n(instance_engine:vllm_num_requests_waiting:max\nand (instance_engine:vllm_num_requests_running:max and ignoring (model_name) instance_engine:vllm_null_block:bool == 1\nor instance_engine:vllm_request_success:rate5m > 0)\nunless instance_engine:vllm_request_tokens:max_bucket)\nunless instance_engine:vllm_engine_asleep:bool > 0)",
            "for": "15m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMKVCapacityUnknown",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests wait, no KV capacity known (no vllm:cache_config_info number, no sidecar), for 15 minutes. Run the sidecar with --num-gpu-blocks.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmkvcapacityunknown",
              "summary": "vLLM's KV capacity is unknown to the rules while requests wait."
            },
            "expr": "max without (job, instance, container) (\n(instance_engine:vllm_num_requests_waiting:max > 0\nand instance_engine:vllm_kv_capacity_unknown:bool == 1\nunless instance_engine:vllm_kv_full:bool == 1\nunless instance_engine:vllm_stuck:bool)\nunless instance_engine:vllm_engine_asleep:bool > 0)\nand endpoint_engine:vllm_without_sidecar:bool",
            "for": "15m",
            "labels": {
              "severity": "warning"
            }
          }
        ]
      },
      {
        "name": "vllm-headroom.scheduler.alerts",
        "rules": [
          {
            "alert": "VLLMSchedulerStuck",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests wait and the engine made no step for 10 minutes (sidecar verdict stuck held, else vLLM's series: flat step counters).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmschedulerstuck",
              "summary": "vLLM has queued requests but makes no engine steps."
            },
            "expr": "endpoint_engine:vllm_headroom_requests_waiting:max > 0\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"stuck\"}) > 0.5\nor max without (job, instance, container) (\n(instance_engine:vllm_num_requests_waiting_schedulable:max\nand instance_engine:vllm_stuck:bool)\nunless instance_engine:vllm_engine_asleep:bool > 0)\nand endpoint_engine:vllm_without_sidecar:bool",
            "for": "5m",
            "labels": {
              "severity": "critical"
            }
          },
          {
            "alert": "VLLMEngineAsleepWithQueue",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): {{`{{ $value | humanize }}`}} requests wait while the engine sleeps, for 10 minutes. Wake it (POST /wake_up).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmengineasleepwithqueue",
              "summary": "vLLM is in sleep mode while requests wait (deliberate; no page)."
            },
            "expr": "endpoint_engine:vllm_headroom_requests_waiting:max > 0\nand sum without (verdict) (endpoint_engine:vllm_headroom_verdict:share5m{verdict=~\"sleeping\"}) > 0.5\nor max without (job, instance, container) (\ninstance_engine:vllm_num_requests_waiting:max > 0\nand instance_engine:vllm_engine_asleep:bool > 0)\nand endpoint_engine:vllm_without_sidecar:bool",
            "for": "10m",
            "labels": {
              "severity": "info"
            }
          }
        ]
      },
      {
        "name": "vllm-headroom.sidecar.alerts",
        "rules": [
          {
            "alert": "VLLMHeadroomCapacityConfigError",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} ({{`{{ $labels.model_name }}`}}{{`{{ with $labels.engine }}`}}, engine {{`{{ . }}`}}{{`{{ end }}`}}): the sidecar refuses its configuration (e.g. num_gpu_blocks < 2; {{`{{ $value | humanize }}`}}) for 10 minutes; its /api/v1/diagnosis names the value.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomcapacityconfigerror",
              "summary": "The sidecar refuses an engine's configuration."
            },
            "expr": "max by (cluster, namespace, pod, vllm_endpoint, model_name, engine) (\n(vllm_headroom_capacity_undetermined{reason=\"config_error\"} == 1)\n* on (cluster, job, instance, target) group_left (vllm_endpoint) instance_target:vllm_headroom_endpoint:info)",
            "for": "10m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMHeadroomSidecarDown",
            "annotations": {
              "description": "Prometheus cannot scrape the sidecar {{`{{ with $labels.pod }}`}}of {{`{{ . }}`}} {{`{{ end }}`}}at {{`{{ $labels.instance }}`}} for 5 minutes: the engine alerts judge from vLLM's series alone.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomsidecardown",
              "summary": "The vllm-headroom sidecar is not scraped."
            },
            "expr": "max by (cluster, namespace, instance, pod, container) (\n(up{{ "{" }}{{ include "vllm-headroom.jsonString" .Values.prometheusRule.sidecarSelector }}} == 0 or up == 0 and on (cluster, job, instance) instance:vllm_headroom_sidecar:info)\nunless on (cluster, namespace, instance, pod, container) vllm_headroom_up)",
            "for": "5m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMHeadroomTargetDown",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}}: the sidecar cannot scrape vLLM ({{`{{ $labels.cause }}`}}: vllm_down, {{ include "vllm-headroom.durationText" .Values.prometheusRule.startupLimit }} after it was up, nor can Prometheus; sidecar_unreachable, {{ include "vllm-headroom.durationText" .Values.prometheusRule.targetDownAfter }}, Prometheus can). The sidecar's /readyz says why.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomtargetdown",
              "summary": "vLLM stopped answering its sidecar and is not back."
            },
            "expr": "max by (cluster, namespace, instance, pod, container, target, vllm_endpoint, cause) (\nlabel_replace((instance_target:vllm_headroom_target_down:seconds > {{ include "vllm-headroom.durationSeconds" .Values.prometheusRule.startupLimit }})\n* on (cluster, job, instance, target) group_left (vllm_endpoint) (instance_target:vllm_headroom_vllm_scraped:bool == 0)\nand on (cluster, job, instance, target) vllm_headroom_target_seen_up == 1, \"cause\", \"vllm_down\", \"\", \"\")\nor label_replace((instance_target:vllm_headroom_target_down:seconds > {{ include "vllm-headroom.durationSeconds" .Values.prometheusRule.targetDownAfter }})\n* on (cluster, job, instance, target) group_left (vllm_endpoint) (instance_target:vllm_headroom_vllm_scraped:bool == 1), \"cause\", \"sidecar_unreachable\", \"\", \"\"))",
            "for": "1m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMStartupSlow",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}}: vLLM has not answered once in the {{ include "vllm-headroom.durationText" .Values.prometheusRule.startupLimit }} since its sidecar started; check vLLM's log.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmstartupslow",
              "summary": "vLLM has not come up since its sidecar started."
            },
            "expr": "max by (cluster, namespace, instance, pod, container, target, vllm_endpoint) (\n(instance_target:vllm_headroom_target_down:seconds > {{ include "vllm-headroom.durationSeconds" .Values.prometheusRule.startupLimit }})\n* on (cluster, job, instance, target) group_left (vllm_endpoint) (instance_target:vllm_headroom_vllm_scraped:bool == 0)\nand on (cluster, job, instance, target) vllm_headroom_target_seen_up == 0)",
            "for": "1m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMMetricsAbsent",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}} serves vLLM's API without vllm:* engine metrics for 10 minutes (--disable-log-stats?).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmmetricsabsent",
              "summary": "vLLM answers but exports no engine metrics (--disable-log-stats?)."
            },
            "expr": "max by (cluster, namespace, pod, vllm_endpoint) (\n(increase(vllm_headroom_scrape_errors_total{reason=\"no_vllm_metrics\"}[5m]) > 0)\n* on (cluster, job, instance, target) group_left (vllm_endpoint) instance_target:vllm_headroom_endpoint:info)",
            "for": "10m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMHeadroomVllmNotScraped",
            "annotations": {
              "description": "{{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.vllm_endpoint }}`}}: the sidecar has read vLLM's metrics for {{ include "vllm-headroom.durationText" .Values.prometheusRule.vllmNotScrapedAfter }}, Prometheus has none: check the monitor's port (Helm: vllm.portName).",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomvllmnotscraped",
              "summary": "The sidecar reads vLLM's metrics, but Prometheus does not scrape vLLM."
            },
            "expr": "max by (cluster, namespace, instance, pod, container, target, vllm_endpoint) (\n(min_over_time(vllm_headroom_up{target=~\"[A-Za-z][A-Za-z0-9+.-]*://(?:localhost|127(?:\\\\.[0-9]+){3}|0\\\\.0\\\\.0\\\\.0|\\\\[::1\\\\])(?::[0-9]+)?(?:/.*)?\"}[5m]) == 1\nor min_over_time(vllm_headroom_up{pod=\"\"}[5m]) == 1)\n* on (cluster, job, instance, target) group_left (vllm_endpoint) (instance_target:vllm_headroom_vllm_scraped:bool == 0))",
            "for": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.vllmNotScrapedAfter }}",
            "labels": {
              "severity": "warning"
            }
          }
        ]
      },
      {
        "interval": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.configInterval }}",
        "name": "vllm-headroom.bundle.alerts",
        "rules": [
          {
            "alert": "VLLMHeadroomRulesSkew",
            "annotations": {
              "description": "The sidecar {{`{{ with $labels.pod }}`}}of {{`{{ . }}`}} {{`{{ end }}`}}at {{`{{ $labels.instance }}`}}{{`{{ with $labels.target }}`}} ({{`{{ . }}`}}){{`{{ end }}`}} and these rules (schema 1) disagree for 15 minutes: {{`{{ if eq $labels.cause \"schema\" }}`}}it exports schema {{`{{ $labels.schema }}`}}{{`{{ else }}`}}it exports {{`{{ $value | humanize }}`}} of the 4 series the rules read per target{{`{{ end }}`}}. Upgrade sidecar and rules together.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomrulesskew",
              "summary": "The sidecar and the rules disagree on their series."
            },
            "expr": "max by (cluster, namespace, instance, pod, container, target, schema, cause) (\nlabel_replace(vllm_headroom_build_info{schema!=\"1\"}, \"cause\", \"schema\", \"\", \"\")\nor label_replace(((count by (cluster, job, instance, target) (group by (cluster, job, instance, target, __name__) ({__name__=~\"vllm_headroom_target_seen_up|vllm_headroom_scrape_errors_total|vllm_headroom_verdict|vllm_headroom_requests_waiting\"}))\nor group by (cluster, job, instance, target) (vllm_headroom_requests_running) * 0) < 4\nand on (cluster, job, instance, target) vllm_headroom_requests_running)\n* on (cluster, job, instance) group_left (namespace, pod, container) vllm_headroom_build_info{schema=\"1\"}, \"cause\", \"series_missing\", \"\", \"\")\nor label_replace(vllm_headroom_build_info{schema=\"1\"} unless on (cluster, job, instance) vllm_headroom_up, \"cause\", \"series_missing\", \"\", \"\") * 0)",
            "for": "15m",
            "labels": {
              "severity": "warning"
            }
          },
          {
            "alert": "VLLMHeadroomDuplicateSeries",
            "annotations": {
              "description": "Each series of {{`{{ with $labels.pod }}`}}{{`{{ . }}`}} at {{`{{ end }}`}}{{`{{ $labels.instance }}`}} arrives {{`{{ $value | humanize }}`}} times (HA replicas without de-duplication?) for 15 minutes: the rules count it once, other sums double. De-duplicate.",
              "runbook_url": "{{ include "vllm-headroom.jsonString" .Values.prometheusRule.runbookBaseUrl }}#vllmheadroomduplicateseries",
              "summary": "vLLM's series arrive more than once (no de-duplication)."
            },
            "expr": "max by (cluster, namespace, pod, instance) (count by (cluster, namespace, job, instance, pod, container, model_name, engine) (vllm:num_requests_running) > 1)",
            "for": "15m",
            "labels": {
              "severity": "warning"
            }
          }
        ]
      }
    ]
  }
}
