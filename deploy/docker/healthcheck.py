"""Container HEALTHCHECK: exit 0 when the sidecar's /healthz answers 200 (stdlib only, no shell needed).

Follows VLLM_HEADROOM_WEB_LISTEN_ADDRESS so the check still hits the sidecar when its port is changed.
"""

import os
import sys
import urllib.request

address = os.environ.get("VLLM_HEADROOM_WEB_LISTEN_ADDRESS") or "0.0.0.0:9478"
host, _, port = address.rpartition(":")
host = host.strip("[]")
if host in ("", "0.0.0.0", "::"):
    host = "127.0.0.1"
elif ":" in host:
    host = f"[{host}]"
try:
    with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=4) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except Exception as exc:  # any failure is "unhealthy"; say why in `docker inspect`
    print(f"healthcheck: {exc}", file=sys.stderr)
    sys.exit(1)
