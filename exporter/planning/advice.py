"""The advice engine's old home: it moved to `exporter.pipeline.advice`, where the one judgement (pipeline/judge.py)
stores its result on each report (`EngineReport.advice`). These names stay importable from here."""

from __future__ import annotations

from ..pipeline.advice import SHARE_HIGH as SHARE_HIGH
from ..pipeline.advice import SHARE_LOW as SHARE_LOW
from ..pipeline.advice import advise as advise
from ..pipeline.advice import advise_server as advise_server
from ..pipeline.advice import budget as budget
from ..pipeline.advice import kv_capacity as kv_capacity
from ..pipeline.advice import max_model_len_over_pool as max_model_len_over_pool
from ..pipeline.advice import max_num_seqs as max_num_seqs
from ..pipeline.advice import seqs_range as seqs_range
from ..pipeline.advice import server_max_num_seqs as server_max_num_seqs
from ..pipeline.report import Advice as Advice
