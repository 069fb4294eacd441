"""deploy/helm/vllm-headroom: lints and renders offline (Helm v4 SDK), and renders the same objects as kustomize."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from .conftest import K8S_VERSIONS, Doc, find, load_all, probes_on_health_listener, sidecar_of

Helm = Callable[..., dict[str, Any]]
Validate = Callable[..., list[dict[str, Any]]]
WARNING = 2  # Helm's lint severities: 1 info, 2 warning, 3 error

INSTALL = {"monitoring": {"install": True}}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "monitoring": INSTALL,
    "monitoring-only": {**INSTALL, "podMonitor": {"enabled": False}, "service": {"enabled": False}},
    "servicemonitor": {"podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}},
    "own-deployment": {"vllm": {"deployment": {"create": True}}},
    "own-deployment-legacy": {"vllm": {"deployment": {"create": True}}, "sidecar": {"native": False}},
    "nothing-optional": {**INSTALL, "podMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
                         "dashboards": {"enabled": False}, "service": {"enabled": False}},
    "custom": {"vllm": {"port": 8080, "portName": "api", "podLabels": {"app": "llm"}},
               "podMonitor": {"interval": "30s", "scrapeVllm": False},
               "thresholds": {"fullUsage": 0.9, "stuckAfter": "2m"},
               "image": {"repository": "registry.example/vllm-headroom", "tag": "0.1.0-rc1"},
               "sidecar": {"extraEnv": [{"name": "VLLM_HEADROOM_MAX_NUM_SEQS", "value": "64"}],
                           "healthPort": 9600}},
}


def objects(out: dict[str, Any]) -> list[Doc]:
    return [d for name, text in sorted(out["manifests"].items()) if not name.endswith("NOTES.txt")
            for d in load_all(text)]


def notes(out: dict[str, Any]) -> str:
    return str(next(text for name, text in out["manifests"].items() if name.endswith("NOTES.txt")))


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> dict[str, dict[str, Any]]:
    return {name: helm(values) for name, values in VARIANTS.items()}


@pytest.mark.parametrize("variant", VARIANTS)
def test_lints_renders_and_validates(variant: str, rendered: dict[str, dict[str, Any]], validate: Validate) -> None:
    out = rendered[variant]
    assert out["schema_error"] is None and out["render_error"] is None
    assert not out["lint"]["errors"], out["lint"]
    assert not [m for m in out["lint"]["messages"] if m["severity"] >= WARNING], out["lint"]["messages"]
    docs = objects(out)
    results = validate(docs, K8S_VERSIONS)
    assert not [r for r in results if r["error"]], [r for r in results if r["error"]]


def test_default_objects(rendered: dict[str, dict[str, Any]]) -> None:
    """A release per vLLM deployment: its scrape path and Service; the cluster-wide objects only when asked for."""
    docs = objects(rendered["defaults"])
    assert sorted(d["kind"] for d in docs) == ["PodMonitor", "Service"]
    assert {d["metadata"]["name"] for d in docs} == {"vllm-headroom"}
    service = find(docs, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"headroom": 9478, "http": 8000}
    docs = objects(rendered["monitoring"])
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "PodMonitor", "PrometheusRule", "Service"]
    assert {d["metadata"]["name"] for d in docs} == {"vllm-headroom", "vllm-headroom-dashboards"}
    assert sorted(d["kind"] for d in objects(rendered["monitoring-only"])) == ["ConfigMap", "PrometheusRule"]
    assert "kubectl patch" in notes(rendered["monitoring"])
    assert "kubectl patch" not in notes(rendered["monitoring-only"])  # no sidecar in that release


def test_toggles_gate_on_values(rendered: dict[str, dict[str, Any]]) -> None:
    assert [d["kind"] for d in objects(rendered["nothing-optional"])] == []
    kinds = {d["kind"] for d in objects(rendered["servicemonitor"])}
    assert "ServiceMonitor" in kinds and "PodMonitor" not in kinds


def test_custom_values_reach_the_objects(rendered: dict[str, dict[str, Any]]) -> None:
    docs = objects(rendered["custom"])
    monitor = find(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {"app": "llm"}
    assert [(e["port"], e["interval"]) for e in monitor["spec"]["podMetricsEndpoints"]] == [("headroom", "30s")]
    patch = _patch_from_notes(notes(rendered["custom"]))
    sidecar = patch["spec"]["template"]["spec"]["initContainers"][0]
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["VLLM_HEADROOM_TARGET"] == "http://127.0.0.1:8080"
    assert env["VLLM_HEADROOM_VERDICT_FULL_USAGE"] == "0.9" and env["VLLM_HEADROOM_VERDICT_STUCK_AFTER"] == "2m"
    assert env["VLLM_HEADROOM_MAX_NUM_SEQS"] == "64"
    assert sidecar["image"] == "registry.example/vllm-headroom:0.1.0-rc1"
    assert probes_on_health_listener(sidecar) == 9600  # the kubelet's probes follow sidecar.healthPort


def test_probes_ask_the_health_listener(rendered: dict[str, dict[str, Any]]) -> None:
    """The chart's probes ask /healthz on the health listener, never on the port the crowd uses (issue 21)."""
    for variant in ("defaults", "own-deployment", "own-deployment-legacy"):
        out = rendered[variant]
        deployments = [d for d in objects(out) if d["kind"] == "Deployment"]
        sidecar = (sidecar_of(deployments[0])[0] if deployments
                   else _patch_from_notes(notes(out))["spec"]["template"]["spec"]["initContainers"][0])
        assert probes_on_health_listener(sidecar) == 9479, variant


def _patch_from_notes(text: str) -> Doc:
    m = re.search(r"kubectl patch deployment (\S+) -n (\S+) --type strategic -p '(.+)'", text)
    assert m, text
    patch: Doc = json.loads(m.group(3))
    return patch


def test_same_sidecar_as_kustomize(rendered: dict[str, dict[str, Any]], kustomize: Callable[[str], list[Doc]]) -> None:
    """Chart and kustomize base run the identical container (the chart adds the verdict thresholds as env)."""
    base, _ = sidecar_of(find(kustomize("base"), "Deployment"))
    chart, where = sidecar_of(find(objects(rendered["own-deployment"]), "Deployment"))
    assert where == "initContainers"
    strip = {"env"}
    assert {k: v for k, v in chart.items() if k not in strip} == {k: v for k, v in base.items() if k not in strip}
    chart_env = {e["name"]: e["value"] for e in chart["env"]}
    assert {e["name"]: e["value"] for e in base["env"]}.items() <= chart_env.items()
    # The printed patch for an existing Deployment holds that same container.
    patch = _patch_from_notes(notes(rendered["defaults"]))
    assert patch["spec"]["template"]["spec"]["shareProcessNamespace"] is True
    assert patch["spec"]["template"]["spec"]["initContainers"] == [chart]
    legacy, where = sidecar_of(find(objects(rendered["own-deployment-legacy"]), "Deployment"))
    assert where == "containers" and legacy == {k: v for k, v in chart.items() if k != "restartPolicy"}


def test_values_schema_rejects_bad_values(helm: Helm) -> None:
    bad: dict[str, Any]
    for bad in ({"podMonitor": {"enabled": "yes"}}, {"vllm": {"port": 0}}, {"thresholds": {"fullUsage": 2}},
                {"sidecar": {"scrapeInterval": "5 seconds"}}, {"podMonitr": {}},
                # more than 4 decimals (the rules would write it two ways), Prometheus durations only
                {"thresholds": {"fullUsage": 0.12345}}, {"prometheusRule": {"configInterval": "1.5h"}},
                {"prometheusRule": {"startupLimit": "1d"}}, {"prometheusRule": {"scrapeGap": "m"}},
                {"prometheusRule": {"sidecarSelector": ""}}, {"profile": {"quantile": 1}},
                # not PromQL matchers: braces, a trailing comma, an unquoted value (the rules would not parse)
                {"prometheusRule": {"vllmSelector": '{namespace="a"}'}},
                {"prometheusRule": {"vllmSelector": 'namespace=~"llm-.*",'}},
                {"prometheusRule": {"sidecarSelector": "job=vllm-headroom"}}):
        assert helm(bad)["schema_error"], bad


def test_values_file_documents_every_key() -> None:
    from .conftest import CHART

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) == set(schema["properties"]) - {"global"}


TWO_SCRAPE_PATHS = ("podMonitor.enabled and serviceMonitor.enabled are both true, which would scrape every vLLM pod "
                    "twice: set podMonitor.enabled=false to scrape through the Service, or serviceMonitor.enabled=false"
                    " to keep the PodMonitor")


def test_two_scrape_paths_are_refused_in_one_sentence(helm: Helm) -> None:
    """PodMonitor and ServiceMonitor together would scrape every pod twice: `helm install` stops with one sentence
    naming both values (a schema `not` would print only "at '': 'not' failed"); either one alone renders."""
    out = helm({"serviceMonitor": {"enabled": True}})  # podMonitor.enabled is true by default
    assert out["schema_error"] is None
    where = r"execution error at \(vllm-headroom/templates/servicemonitor\.yaml:\d+:\d+\): "
    assert re.fullmatch(where + re.escape(TWO_SCRAPE_PATHS), str(out["render_error"])), out["render_error"]
    for one in ({"podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}}, {}):
        out = helm(one)
        assert out["schema_error"] is None and out["render_error"] is None, one
        kinds = [d["kind"] for d in objects(out)]
        assert kinds.count("PodMonitor") + kinds.count("ServiceMonitor") == 1, kinds
    out = helm({"podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}, "service": {"enabled": False}})
    assert str(out["render_error"]).endswith(": serviceMonitor.enabled needs service.enabled (the ServiceMonitor "
                                             "scrapes through the chart's Service): set service.enabled=true, or use "
                                             "the PodMonitor")


@pytest.mark.parametrize(("value", "kind", "field"), [("podMonitor", "PodMonitor", "podMetricsEndpoints"),
                                                      ("serviceMonitor", "ServiceMonitor", "endpoints")])
def test_relabel_knobs_reach_both_endpoints(helm: Helm, validate: Validate, value: str, kind: str, field: str) -> None:
    relabel = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    drop = [{"sourceLabels": ["__name__"], "regex": "http_request_size_bytes.*", "action": "drop"}]
    only = {"podMonitor": {"enabled": value == "podMonitor"}, "serviceMonitor": {"enabled": value == "serviceMonitor"}}
    knobs = {"relabelings": relabel, "metricRelabelings": drop, "honorLabels": True}
    docs = objects(helm({**only, value: {**only[value], **knobs}}))
    endpoints = find(docs, kind)["spec"][field]
    vllm_port = 8000 if kind == "PodMonitor" else "http"  # a pod's port by number, the chart's Service's by name
    assert [e.get("port", e.get("portNumber")) for e in endpoints] == ["headroom", vllm_port]
    for e in endpoints:
        assert e["relabelings"][1:] == relabel and e["relabelings"][0]["targetLabel"] == "job"
        assert e["metricRelabelings"] == drop and e["honorLabels"] is True
    assert not [r for r in validate([find(docs, kind)]) if r["error"]]
    plain = find(objects(helm(only)), kind)["spec"][field]
    assert all("metricRelabelings" not in e and "honorLabels" not in e for e in plain)
    assert all(len(e["relabelings"]) == 1 for e in plain)


def _cluster_wide(out: dict[str, Any]) -> tuple[list[Doc], list[str]]:
    """The PrometheusRules of a rendered release and the uids of the dashboards it ships."""
    docs = objects(out)
    uids = [json.loads(v)["uid"] for d in docs if d["kind"] == "ConfigMap" for v in d["data"].values()]
    return [d for d in docs if d["kind"] == "PrometheusRule"], uids


def test_a_fleet_of_releases_pages_once(helm: Helm) -> None:
    """One release per vLLM deployment, the normal pattern: with default values none of them ships the cluster-wide
    rules or dashboards; the documented switch in one release ships them once; every other release stays off."""
    fleet = [("llama", "team-a", {}), ("qwen", "team-b", {}), ("mistral", "team-a", {})]
    rules = [r for name, ns, values in fleet for r in _cluster_wide(helm(values, name, ns))[0]]
    uids = [u for name, ns, values in fleet for u in _cluster_wide(helm(values, name, ns))[1]]
    assert rules == [] and uids == []
    fleet[0] = ("llama", "team-a", INSTALL)
    rendered = [helm(values, name, ns) for name, ns, values in fleet]
    rules = [r for out in rendered for r in _cluster_wide(out)[0]]
    uids = [u for out in rendered for u in _cluster_wide(out)[1]]
    assert len(rules) == 1 and uids and len(uids) == len(set(uids)) == len(_dashboard_files())
    for out in rendered[1:]:
        assert {d["kind"] for d in objects(out)} == {"PodMonitor", "Service"}
        assert "This release installs no PrometheusRule and no dashboards (monitoring.install=false" in notes(out)
    assert "keep monitoring.install=false in every other release" in notes(rendered[0])


def test_cluster_wide_objects_have_fixed_names(helm: Helm) -> None:
    """A second release that sets monitoring.install in the same namespace renders the same object names, so Helm
    refuses it (the objects belong to the first release) instead of installing a second copy of every alert."""
    names = []
    for release in ("llama", "qwen"):
        docs = objects(helm(INSTALL, release, "monitoring"))
        names.append({(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("PrometheusRule", "ConfigMap")})
    assert names[0] == names[1] == {("PrometheusRule", "vllm-headroom"), ("ConfigMap", "vllm-headroom-dashboards")}


def test_each_cluster_wide_object_can_be_left_out(helm: Helm) -> None:
    """With monitoring.install, prometheusRule.enabled and dashboards.enabled choose which of the two to ship."""
    assert [d["kind"] for d in objects(helm({**INSTALL, "dashboards": {"enabled": False}}))
            if d["kind"] in ("PrometheusRule", "ConfigMap")] == ["PrometheusRule"]
    assert [d["kind"] for d in objects(helm({**INSTALL, "prometheusRule": {"enabled": False}}))
            if d["kind"] in ("PrometheusRule", "ConfigMap")] == ["ConfigMap"]


def _dashboard_files() -> list[str]:
    from .conftest import CHART

    return sorted(p.name for p in (CHART / "files" / "dashboards").glob("*.json.tpl"))


def test_the_patch_names_the_users_deployment_or_the_chart_stops(helm: Helm) -> None:
    """The printed patch once targeted a Deployment called `vllm` unless vllm.deploymentName was set: a user whose
    Deployment has another name patched nothing (or the wrong one). The name is now required for it."""
    out = helm({"vllm": {"deploymentName": ""}})
    where = r"execution error at \(vllm-headroom/templates/[a-z]+\.yaml:\d+:\d+\): "
    assert re.fullmatch(where + re.escape(NO_DEPLOYMENT), str(out["render_error"])), out["render_error"]
    notes_ = notes(helm({"vllm": {"deploymentName": "llama-3-8b"}}))
    assert "kubectl patch deployment llama-3-8b -n inference" in notes_
    # No patch to print: the chart runs vLLM itself, or the release holds only the cluster-wide objects.
    assert helm(VARIANTS["own-deployment"])["render_error"] is None
    assert helm(VARIANTS["monitoring-only"])["render_error"] is None


def test_scrapes_the_users_pods_whatever_their_labels_and_port_name(helm: Helm) -> None:
    """Without vllm.podLabels the monitors select the labels the printed patch adds (not a guessed
    app.kubernetes.io/name: vllm), and vLLM's /metrics by port number unless vllm.portName names the port."""
    out = helm({"vllm": {"deploymentName": "llama", "port": 8080}}, release="llama")
    docs = objects(out)
    selector = {"vllm-headroom/sidecar": "injected", "vllm-headroom/release": "llama"}
    monitor = find(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == selector
    assert find(docs, "Service")["spec"]["selector"] == selector
    patch = _patch_from_notes(notes(out))
    assert patch["spec"]["template"]["metadata"]["labels"] == selector
    vllm_endpoint = monitor["spec"]["podMetricsEndpoints"][1]
    assert vllm_endpoint["portNumber"] == 8080 and "port" not in vllm_endpoint
    named = find(objects(helm({"vllm": {"deploymentName": "llama", "portName": "api"}})), "PodMonitor")
    assert named["spec"]["podMetricsEndpoints"][1]["port"] == "api"


@pytest.mark.parametrize(("kube", "native", "ok"), [("v1.27.0", False, True), ("v1.27.0", True, False),
                                                    ("v1.28.9", True, False), ("v1.29.0", True, True),
                                                    ("v1.25.0", False, True)])
def test_kube_version_floor_matches_the_sidecar_setting(helm: Helm, validate: Validate, kube: str, native: bool,
                                                        ok: bool) -> None:
    """sidecar.native=false exists for clusters without native sidecars (< 1.29), so the chart must install
    there: its floor is 1.25, and a native sidecar on an older cluster stops with one sentence."""
    from .conftest import CHART

    floor = re.search(r'^kubeVersion: ">=(\d+)\.(\d+)\.0-0"$', (CHART / "Chart.yaml").read_text(), re.M)
    assert floor and (int(floor[1]), int(floor[2])) <= (1, 25), "Helm refuses clusters below the chart's kubeVersion"
    values = {"vllm": {"deployment": {"create": True}}, "sidecar": {"native": native}}
    out = helm(values, kube_version=kube)
    if ok:
        assert out["render_error"] is None, out["render_error"]
        minor = kube.split(".")[1]
        assert not [r for r in validate(objects(out), [f"1.{minor}"]) if r["error"]]
    else:
        assert str(out["render_error"]).endswith(NATIVE_ON_OLD.format(kube=kube)), out["render_error"]


NO_DEPLOYMENT = ("vllm.deploymentName is empty: set it to the name of the vLLM Deployment the sidecar goes into "
                 "(--set vllm.deploymentName=<name>; the printed kubectl patch targets it), or set "
                 "vllm.deployment.create=true to let the chart run vLLM")
NATIVE_ON_OLD = ("sidecar.native=true needs Kubernetes >= 1.29 (native sidecars), this cluster is {kube}: set "
                 "sidecar.native=false to run the sidecar as a plain second container")


@pytest.mark.parametrize(("values", "forward"), [
    ({"vllm": {"deploymentName": "llama"}, "sidecar": {"port": 9100}, "service": {"enabled": False}},
     "deploy/llama 9478:9100"),
    ({"vllm": {"deploymentName": "llama"}, "sidecar": {"port": 9100}, "service": {"port": 9200}}, ":9200"),
])
def test_the_notes_port_forward_reaches_the_sidecar(helm: Helm, values: dict[str, Any], forward: str) -> None:
    """Issue 24's review: with the Service off, NOTES forwarded to service.port (9478) on the Deployment while the
    sidecar listened on sidecar.port."""
    line = next(ln for ln in notes(helm(values)).splitlines() if "port-forward" in ln)
    assert line.rstrip().endswith(forward) or forward in line, line


TLS = {"enabled": True, "serverName": "vllm.inference.svc", "caSecret": "vllm-ca", "clientCertSecret": "sidecar-tls",
       "insecureSkipVerify": False}


@pytest.mark.parametrize("monitor", ["podMonitor", "serviceMonitor"])
def test_vllm_behind_tls(helm: Helm, validate: Validate, monitor: str) -> None:
    """vllm.tls: the sidecar scrapes https with the CA, server name and client certificate from the Secrets (the
    flags of docs/reference/cli.md as env), the monitors scrape vLLM's /metrics with the same tlsConfig."""
    values: dict[str, Any] = {"vllm": {"tls": TLS}}
    if monitor == "serviceMonitor":
        values |= {"podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}}
    out = helm(values)
    assert out["schema_error"] is None and out["render_error"] is None, out
    docs = objects(out)
    assert not [r for r in validate(docs) if r["error"]]
    patch = _patch_from_notes(notes(out))
    pod = patch["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["VLLM_HEADROOM_TARGET"] == "https://127.0.0.1:8000"
    assert env["VLLM_HEADROOM_SCRAPE_TLS_SERVER_NAME"] == "vllm.inference.svc"
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"]}
    assert secrets == {"vllm-headroom-tls-ca": "vllm-ca", "vllm-headroom-tls-client": "sidecar-tls"}
    assert env["VLLM_HEADROOM_SCRAPE_CA_FILE"] == mounts["vllm-headroom-tls-ca"] + "/ca.crt"
    assert env["VLLM_HEADROOM_SCRAPE_CLIENT_CERT"] == mounts["vllm-headroom-tls-client"] + "/tls.crt"
    assert env["VLLM_HEADROOM_SCRAPE_CLIENT_KEY"] == mounts["vllm-headroom-tls-client"] + "/tls.key"
    assert "VLLM_HEADROOM_SCRAPE_INSECURE_SKIP_VERIFY" not in env  # verification stays on
    kind = "PodMonitor" if monitor == "podMonitor" else "ServiceMonitor"
    m = find(docs, kind)
    headroom, vllm = m["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
    assert "scheme" not in headroom and "tlsConfig" not in headroom  # the sidecar itself serves http
    assert vllm["scheme"] == "https" and vllm["tlsConfig"] == {
        "ca": {"secret": {"name": "vllm-ca", "key": "ca.crt"}}, "cert": {"secret": {"name": "sidecar-tls",
                                                                                    "key": "tls.crt"}},
        "keySecret": {"name": "sidecar-tls", "key": "tls.key"}, "serverName": "vllm.inference.svc"}
    # The env names are the sidecar's own flags (an unknown VLLM_HEADROOM_* is only warned about, so check here).
    from exporter.cli import build_parser
    from exporter.cli.flags import ENV_NAMES

    build_parser()  # registers every flag's variable
    assert {k for k in env if k.startswith("VLLM_HEADROOM_SCRAPE")} <= ENV_NAMES


def test_tls_off_changes_nothing(rendered: dict[str, dict[str, Any]]) -> None:
    sidecar = _patch_from_notes(notes(rendered["defaults"]))["spec"]["template"]["spec"]["initContainers"][0]
    assert "volumeMounts" not in sidecar and not [e for e in sidecar["env"] if "SCRAPE_" in e["name"] and
                                                  e["name"] != "VLLM_HEADROOM_SCRAPE_INTERVAL"]
    assert all("tlsConfig" not in e for e in find(objects(rendered["defaults"]), "PodMonitor")["spec"][
        "podMetricsEndpoints"])


def test_tls_insecure_with_a_ca_is_refused(helm: Helm) -> None:
    out = helm({"vllm": {"tls": {**TLS, "insecureSkipVerify": True}}})
    assert "vllm.tls.insecureSkipVerify checks nothing" in out["render_error"]
