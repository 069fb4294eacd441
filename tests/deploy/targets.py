"""Does every scrape and scale target in one render point at something the same render creates?

A platform team applies one render (an overlay, a recipe's example, a Helm release) and expects each PodMonitor,
ServiceMonitor, ScaledObject and HPA in it to find its pods, Service and port there, as prometheus-operator, KEDA and
the HPA controller resolve them:
- PodMonitor: pods of its namespace whose labels match its selector; `port` by container port name, `portNumber`
  by number (only declared ports are discovered).
- ServiceMonitor: Services of its namespace matching its selector; `port` by the Service port's name.
- Service: pods of its namespace matching its selector; each port's targetPort by name or number.
- ScaledObject / HPA: scaleTargetRef by kind and name in its namespace. KEDA's metrics-api scaler with
  aggregateFromKubeServiceEndpoints (metrics_api_scaler.go @v2.19.0 getEndpointsUrlsFromServiceURL): the URL's host
  is <service>.<namespace>, its port matched against the EndpointSlice's ports, i.e. the pods' container port.
Pods come from Deployments' templates and from KServe InferenceServices as KServe labels their predictor pods
(isvc labels, spec.predictor.labels, serving.kserve.io/inferenceservice and component: predictor; kserve @aaac4e29
pkg/controller/v1beta1/inferenceservice/components/predictor.go). An object without a namespace is in `namespace`,
the one the render is applied to (`-n`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Doc = dict[str, Any]
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Pod:
    owner: str
    namespace: str
    labels: dict[str, str]
    ports: tuple[tuple[str | None, int], ...]  # (name, containerPort) of every container, init containers too


def _ns(d: Doc, namespace: str) -> str:
    return str(d["metadata"].get("namespace") or namespace)


def _ports(spec: Doc) -> tuple[tuple[str | None, int], ...]:
    return tuple((p.get("name"), int(p["containerPort"])) for c in (spec.get("containers") or []) +
                 (spec.get("initContainers") or []) for p in c.get("ports") or [])


def pods(docs: list[Doc], namespace: str) -> list[Pod]:
    out = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "LeaderWorkerSet"):
            tpl = d["spec"]["template"]
            out.append(Pod(f"{d['kind']}/{d['metadata']['name']}", _ns(d, namespace),
                           dict(tpl["metadata"].get("labels") or {}), _ports(tpl["spec"])))
        elif d["kind"] == "InferenceService":
            pred = d["spec"]["predictor"]
            labels = {**(d["metadata"].get("labels") or {}), **(pred.get("labels") or {}),
                      "serving.kserve.io/inferenceservice": d["metadata"]["name"], "component": "predictor"}
            out.append(Pod(f"InferenceService/{d['metadata']['name']}", _ns(d, namespace), labels, _ports(pred)))
    return out


def _matches(selector: Doc | None, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels + matchExpressions, or a Service's plain map) against labels."""
    if not selector:
        return False  # an empty selector in our objects is a mistake, never "everything"
    plain = {k: v for k, v in selector.items() if k not in ("matchLabels", "matchExpressions")}
    want = {**plain, **(selector.get("matchLabels") or {})}
    if any(labels.get(k) != v for k, v in want.items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels) or \
                (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values):
            return False
    return True


def _target_port(pod: Pod, target: Any) -> int | None:
    for name, number in pod.ports:
        if (isinstance(target, str) and name == target) or (isinstance(target, int) and number == target):
            return number
    return None


def services(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] == "Service"]


def selected(docs: list[Doc], obj: Doc, namespace: str) -> list[Pod]:
    sel = obj["spec"].get("selector")
    return [p for p in pods(docs, namespace) if p.namespace == _ns(obj, namespace) and _matches(sel, p.labels)]


def unresolved(docs: list[Doc], namespace: str = "default") -> list[str]:
    """One sentence per target that resolves to nothing in `docs`; [] when every one does."""
    out: list[str] = []
    named = {(d["kind"], _ns(d, namespace), d["metadata"]["name"]) for d in docs}
    for d in docs:
        kind, name, ns = d["kind"], d["metadata"]["name"], _ns(d, namespace)
        where = f"{kind} {ns}/{name}"
        if kind in ("Deployment", "StatefulSet"):
            tpl = d["spec"]["template"]["spec"]
            for c in (tpl.get("initContainers") or []) + (tpl.get("containers") or []):
                for env in c.get("env") or []:
                    if env.get("name") == "VLLM_HEADROOM_TARGET" and isinstance(env.get("value"), str):
                        try:
                            port = urlsplit(env["value"]).port
                        except ValueError:
                            port = None
                        if port is None:
                            out.append(f"{where}: sidecar target {env['value']} has no port number")
        if kind == "Service":
            if not DNS_1035.fullmatch(name):  # apimachinery validation.IsDNS1035Label: the API server refuses it
                out.append(f"{where}: the name is no DNS-1035 label (a-z, 0-9, '-', at most 63, a letter first)")
            hit = selected(docs, d, namespace)
            if not hit:
                out.append(f"{where} selects no pod")
            for port in d["spec"]["ports"]:
                for p in hit:
                    if _target_port(p, port.get("targetPort", port["port"])) is None:
                        out.append(f"{where} port {port.get('name')}: {p.owner} has no port {port.get('targetPort')}")
        elif kind == "PodMonitor":
            if d["spec"].get("namespaceSelector"):
                out.append(f"{where} has a namespaceSelector; this check covers its own namespace only")
            hit = selected(docs, d, namespace)
            if not hit:
                out.append(f"{where} selects no pod")
            for e in d["spec"]["podMetricsEndpoints"]:
                if "portNumber" in e and not isinstance(e["portNumber"], int):
                    out.append(f"{where} endpoint {e['portNumber']}: portNumber is no number")
                    continue
                want = e.get("port", e.get("portNumber"))
                for p in hit:
                    if _target_port(p, want) is None:
                        out.append(f"{where} endpoint {want}: {p.owner} declares no such port")
        elif kind == "ServiceMonitor":
            svcs = [s for s in services(docs) if _ns(s, namespace) == ns and _matches(
                d["spec"]["selector"], s["metadata"].get("labels") or {})]
            if not svcs:
                out.append(f"{where} selects no Service")
            for e in d["spec"]["endpoints"]:
                for s in svcs:
                    if e.get("port") not in [p.get("name") for p in s["spec"]["ports"]]:
                        svc = s["metadata"]["name"]
                        out.append(f"{where} endpoint {e.get('port')}: Service {svc} has no such port")
        elif kind in ("ScaledObject", "HorizontalPodAutoscaler"):
            ref = d["spec"]["scaleTargetRef"]
            if (ref.get("kind", "Deployment"), ns, ref["name"]) not in named:
                out.append(f"{where} scales {ref.get('kind', 'Deployment')} {ns}/{ref['name']}, not in the render")
            for trig in d["spec"].get("triggers") or []:
                meta = trig.get("metadata") or {}
                if trig["type"] != "metrics-api" or meta.get("aggregateFromKubeServiceEndpoints") != "true":
                    continue
                url = urlsplit(meta["url"])
                host = (url.hostname or "").split(".")
                if len(host) < 2:
                    out.append(f"{where}: URL host {url.hostname} is not <service>.<namespace>")
                    continue
                svc = [s for s in services(docs) if s["metadata"]["name"] == host[0] and _ns(s, namespace) == host[1]]
                if not svc:
                    out.append(f"{where}: URL names Service {host[1]}/{host[0]}, not in the render")
                    continue
                behind = {n for port in svc[0]["spec"]["ports"] for p in selected(docs, svc[0], namespace)
                          if (n := _target_port(p, port.get("targetPort", port["port"]))) is not None}
                if url.port not in behind:
                    out.append(f"{where}: URL port {url.port} is no endpoint port of Service {host[0]} "
                               f"(its pods' target ports: {sorted(behind)})")
    return out


def clashes(docs: list[Doc], namespace: str = "default") -> list[str]:
    """Objects that one render would write twice: the same kind, namespace and name."""
    seen: dict[tuple[str, str, str], int] = {}
    for d in docs:
        key = (d["kind"], _ns(d, namespace), d["metadata"]["name"])
        seen[key] = seen.get(key, 0) + 1
    return [f"{k} {ns}/{n} x{c}" for (k, ns, n), c in sorted(seen.items()) if c > 1]
