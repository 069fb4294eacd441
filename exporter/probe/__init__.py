"""The probe wing: a controlled load against a staging vLLM, step by step, judged by the pipeline.

The field procedure it automates: send requests of fixed prompt and output lengths, raise the concurrency in
steps, watch /metrics at each step, find the step at which the queue forms and compare it with the theoretical
admission point; then set the theory beside what actually ran in one capacity ledger.

- `plan`: pure. The ramp, the prediction (from `pipeline.derive`, never a second copy of a formula), the steps'
  observations, the ledger and its text and JSON.
- `load`: the HTTP side of the load (token-id or calibrated text prompts, `ignore_eos`, a hard request budget).
- `run`: the orchestration (refuses a target that is not vLLM, ramps, scrapes through `pipeline.target`, stops
  cleanly on Ctrl-C and cancels what it sent, the progress bar).
"""
