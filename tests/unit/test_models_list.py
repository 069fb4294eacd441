"""What the sidecar reads from /v1/models on KServe's model server (issue 24): the V1 protocol's `{"models": [...]}`
on /v1/models and OpenAI's list without max_model_len on /openai/v1/models, recorded as KServe builds them
(tests/fixtures/kserve/README.md: kserve/kserve @aaac4e29, served by FastAPI with vLLM 0.32.0's ModelCard)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.pipeline.scrape import ModelsInfo, ScrapeError, parse_models

RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "kserve" / "huggingfaceserver-models.json").read_text())


def test_kserve_v1_protocol_list_names_the_model_and_no_length() -> None:
    body = json.dumps(RECORDED["/v1/models"])
    assert body == '{"models": ["llama3"]}'
    assert parse_models(body) == ModelsInfo(("llama3",), None)


def test_kserve_openai_list_has_max_model_len_null() -> None:
    (card,) = RECORDED["/openai/v1/models"]["data"]
    assert card["max_model_len"] is None and card["owned_by"] == ""
    assert parse_models(json.dumps(RECORDED["/openai/v1/models"])) == ModelsInfo(("llama3",), None)


@pytest.mark.parametrize("body", ['{"models": "llama3"}', '{"model": ["llama3"]}', "[]", "not json", '{"data": 3}'])
def test_other_shapes_are_still_refused_or_empty(body: str) -> None:
    """Only a list of names under `models` is KServe's; anything else is no model list."""
    try:
        info = parse_models(body)
    except ScrapeError as exc:
        assert exc.reason == "models"
    else:
        assert info == ModelsInfo((), None)  # '{"data": 3}': an OpenAI list with no cards
