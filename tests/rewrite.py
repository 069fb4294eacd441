"""Minimal rewrites of recorded real expositions, for states no recording shows (issue 19's public reports).

Each helper changes exactly the samples or labels it names and fails (AssertionError) when the recording does
not hold them, so a rewrite can never silently do nothing. Tests that use them state in their docstring which
values were rewritten and why (tests/unit/test_issue19_kinds.py).
"""

from __future__ import annotations

import re


def _labels_of(line: str, name: str) -> str:
    return line[len(name):line.rfind(" ")] if line.startswith(name + "{") else ""


def set_sample(text: str, name: str, value: float, **labels: str) -> str:
    """Every sample `name` whose labels include `labels` gets `value`; at least one must exist."""
    out, hit = [], 0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            own = _labels_of(line, name)
            if all(f'{k}="{v}"' in own for k, v in labels.items()):
                line = f"{line[:line.rfind(' ')]} {float(value)!r}"
                hit += 1
        out.append(line)
    assert hit, f"no sample {name}{labels} in the recording"
    return "\n".join(out) + "\n"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample `name` with `labels`."""
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in _labels_of(line, name)
                                                                    for k, v in labels.items())]
    assert len(found) == 1, f"{len(found)} samples {name}{labels}"
    return found[0]


def set_label(text: str, name: str, **labels: str) -> str:
    """Rewrite label values of every `name` sample (an info metric such as vllm:cache_config_info)."""
    out, hit = [], 0
    for line in text.splitlines():
        if line.startswith(name + "{"):
            for k, v in labels.items():
                line, n = re.subn(rf'(?<=[{{,]){k}="[^"]*"', f'{k}="{v}"', line)
                assert n == 1, f"{name} has no label {k}"
            hit += 1
        out.append(line)
    assert hit, f"no sample {name} in the recording"
    return "\n".join(out) + "\n"


def drop(text: str, *prefixes: str) -> str:
    """Remove every sample, HELP and TYPE line of the families starting with one of `prefixes` (as a scrape's
    metricRelabelings drop them, or an older exposition lacks them); at least one line must go."""
    def named(line: str) -> str:
        if line.startswith(("# HELP ", "# TYPE ")):
            return line.split(" ")[2]
        return line

    kept = [line for line in text.splitlines() if not named(line).startswith(prefixes)]
    assert len(kept) < len(text.splitlines()), f"nothing named {prefixes} in the recording"
    return "\n".join(kept) + "\n"


def rename(text: str, old: str, new: str) -> str:
    """Rename a label value or metric name everywhere (e.g. the served model name); it must occur."""
    assert old in text, f"{old!r} not in the recording"
    return text.replace(old, new)


def flag(argv: list[str], name: str, value: str | None) -> list[str]:
    """The command line with `name` set to `value` (added when absent) or removed (None)."""
    out = list(argv)
    if name in out:
        i = out.index(name)
        del out[i:i + 2]
    if value is not None:
        out += [name, value]
    return out


def flags(server_argv: list[object], **values: str | None) -> list[str]:
    """A recording's server command line (meta.json `server_argv`) with each `name=value` set as `--name value`
    (underscores as dashes; None removes the flag)."""
    out = [str(a) for a in server_argv]
    for name, v in values.items():
        out = flag(out, "--" + name.replace("_", "-"), v)
    return out


def add_family(text: str, name: str, kind: str, help_: str, samples: list[tuple[dict[str, str], float]],
               suffix: str = "") -> str:
    """Append one family in prometheus_client's text format (HELP, TYPE, then `name + suffix{labels} value`), for
    a family vLLM exports only with hardware or a peer this machine lacks (a KV connector, an offload tier). The
    HELP text and labels must be copied from vLLM's source, cited by the test; the family must not be there yet."""
    assert f"# TYPE {name} " not in text, f"{name} is already in the recording"
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{suffix}{{{inner}}} {float(value)!r}")
    body = text.rstrip("\n")
    eof = body.endswith("# EOF")  # OpenMetrics (the Rust frontend): the family goes before its end marker
    if eof:
        body = body[: -len("# EOF")].rstrip("\n")
    return body + "\n" + "\n".join(lines) + ("\n# EOF\n" if eof else "\n")
