"""The customer's workload: one loader for every form a customer already has, recognised by content.

Forms (docs/workloads.md has the user-facing description; the file's extension is only a hint):

- JSONL, one request a line: ``{"messages": [...]}`` (chat API) or ``{"prompt": "..."}`` (completions
  API; a ``vllm bench serve`` custom dataset is this form), with optional ``id``, ``tag``, the length and
  the sampling fields. A field no form knows is an error of that line (a typo such as ``max_token``
  would otherwise silently use the default).
- OpenAI request bodies, one a line (what a gateway logs): the same lines with OpenAI's own fields;
  transport and billing fields (``model``, ``stream``, ...) are ignored and counted, fields that would
  change what is generated and cannot be sent alike to both sides (``n`` > 1, ``tools``, ...) skip
  the line with the reason.
- OpenAI Batch API lines (``custom_id``, ``method``, ``url``, ``body``) for ``/v1/chat/completions``
  and ``/v1/completions``: the body as above, the id from ``custom_id``.
- ShareGPT, a JSON array or JSONL of ``{"id", "conversations": [{"from", "value"}]}``: the prompt is
  the conversation up to its last human turn, sent as chat messages; the recorded answer's length
  sets ``max_tokens`` when the line gives none (``answer_max_tokens``).
- CSV with a ``prompt`` column and optional ``id``, ``tag`` / ``category``, length and sampling
  columns; any other column is a wrong header. Each prompt is sent as one user message (chat API)
  unless ``text_api="completions"``.
- A folder of ``.txt`` / ``.md`` files (not recursive), one prompt each, id = the file name; sent as
  for CSV.

A bad line (row, file) is a ``LoadIssue`` (file, line, one-line message) and is skipped; with
``strict=True`` any issue raises ``WorkloadError`` before anything is sent. Whole-file problems
(too big, empty, binary, not UTF-8, wrong CSV header, a form not recognised, no usable request)
always raise ``WorkloadError``. Issue messages never quote the file's text: a workload may be
confidential.

The package's public names are the ones here (``__all__``); its modules are private: ``_model`` (the
vocabulary: request, workload, issues, the fields ignored or refused), ``_lines`` (every line's
checks), ``_forms`` (one parser per form of JSON object), ``_loadtools`` (AIPerf, GuideLLM),
``_gateway`` (LiteLLM's logs), ``_files`` (a file or folder as rows); this module loads, samples
and slices.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from demo.results import Api
from demo.settings import Settings
from demo.workload._files import read_file, read_folder
from demo.workload._model import (
    ANSWER_MAX_TOKENS_CAP,
    DEFAULT_MAX_TOKENS,
    DEFAULT_REASON,
    DEFAULT_TEMPERATURE,
    FORMAT_LABELS,
    IGNORED_FIELDS,
    MAX_LISTED,
    REFUSED_FIELDS,
    UNUSED_REASON,
    Format,
    History,
    Item,
    LoadIssue,
    LoggedAnswer,
    SampleInfo,
    Workload,
    WorkloadError,
    WorkloadRequest,
    answer_max_tokens,
    ignored_reason,
)

__all__ = ['ANSWER_MAX_TOKENS_CAP', 'DEFAULT_MAX_TOKENS', 'DEFAULT_REASON', 'DEFAULT_TEMPERATURE',
           'FORMAT_LABELS', 'Format', 'History', 'IGNORED_FIELDS', 'LoadIssue', 'LoggedAnswer', 'MAX_LISTED',
           'REFUSED_FIELDS',
           'SampleInfo', 'UNUSED_REASON', 'Workload', 'WorkloadError', 'WorkloadRequest',
           'answer_max_tokens', 'ignored_reason', 'load_workload', 'open_workload', 'request_slices',
           'sample']


def _summary(issues: list[LoadIssue]) -> str:
    listed = "; ".join(str(i) for i in issues[:MAX_LISTED])
    more = f"; and {len(issues) - MAX_LISTED} more" if len(issues) > MAX_LISTED else ""
    return listed + more


def _collect(items: list[Item], name: str, fmt: Format
             ) -> tuple[list[WorkloadRequest], list[LoadIssue], Counter[str], int]:
    """The requests (every one: a repeated id gets "#2", "#3", ...), the issues, the ignored fields
    counted, and how many ids were repeated. A session's turns are numbered in file order."""
    requests: list[WorkloadRequest] = []
    issues: list[LoadIssue] = []
    ignored: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    turns: Counter[str] = Counter()
    repeated = 0
    for item in items:
        if isinstance(item, LoadIssue):
            issues.append(item)
            continue
        req = item.request
        seen[req.id] += 1
        update: dict[str, object] = {}
        if seen[req.id] > 1:
            repeated += 1
            rid = f"{req.id}#{seen[req.id]}"
            while rid in seen:
                seen[req.id] += 1
                rid = f"{req.id}#{seen[req.id]}"
            seen[rid] += 1
            update["id"] = rid
        if req.session is not None and req.turn is None:
            turns[req.session] += 1
            update["turn"] = turns[req.session]
        if req.carry and update.get("turn", req.turn) == 1:
            update["carry"] = False  # a session's first turn has no turn before it: its messages are all
            if req.logged_answer is not None:  # ... the logged answer included, sent as given
                update["messages"], update["logged_answer"] = [req.logged_answer, *(req.messages or [])], None
            first = req.logged_answer or next(iter(req.messages or []), None)
            if first is not None and first.role == "tool":
                issues.append(LoadIssue(file=name, line=req.line, message=(
                    "messages.0: a role: tool message with no assistant tool_calls before it (the first turn of "
                    f"session {req.session!r} has no turn before it); give the assistant turn that made the call")))
                turns[req.session or ""] -= "turn" in update  # the session's next line is its first turn
                continue
        requests.append(req.model_copy(update=update) if update else req)
        ignored.update(set(item.ignored))
    return requests, issues, ignored, repeated


def load_workload(path: Path | str, *, max_bytes: int, max_prompt_chars: int, strict: bool = False,
                  text_api: Api = "chat") -> Workload:
    """Load and validate a workload file or folder, in any accepted form; nothing is sent anywhere.

    ``max_bytes`` is ``Settings.workload_max_bytes`` (checked before reading), ``max_prompt_chars`` the
    app's prompt cap (an over-cap prompt is its line's issue). ``text_api`` is how CSV and folder
    prompts are sent. Returns the Workload (its form, requests, skipped lines, ignored fields counted).
    Raises ``WorkloadError`` (one line) when nothing usable remains, or with ``strict`` on any issue
    (``e.issues`` lists them).
    """
    path = Path(path)
    name = path.name or str(path)
    fmt: Format
    if path.is_dir():
        fmt, items = "folder", list(read_folder(path, max_bytes, max_prompt_chars, text_api))
    elif not path.is_file():
        raise WorkloadError(f"{path}: no such file or folder; give a workload file (JSONL, CSV, OpenAI batch, "
                            "ShareGPT) or a folder of .txt files")
    else:
        fmt, items = read_file(path, name, max_bytes, max_prompt_chars, text_api)
    requests, issues, ignored, repeated = _collect(items, name, fmt)
    if strict and issues:
        raise WorkloadError(f"{name}: {len(issues)} bad line(s), nothing was sent (strict): {_summary(issues)}",
                            issues)
    if not requests:
        detail = f": {_summary(issues)}" if issues else ": the header has no rows under it"
        raise WorkloadError(f"{name} has no usable request{detail}", issues)
    stem = path.stem if fmt != "folder" else name
    history: History | None = ("own" if any(r.carry for r in requests) else "logged" if any(r.session for r in requests)
                               else None)
    return Workload(name=stem, source=str(path), format=fmt, requests=requests, issues=issues,
                    ignored_fields=dict(ignored), repeated_ids=repeated, history=history)


def _rank(seed: int, rid: str) -> str:
    return hashlib.sha256(f"{seed}\0{rid}".encode()).hexdigest()


def sample(workload: Workload, n: int, seed: int) -> Workload:
    """n requests drawn reproducibly: the same file, n and seed give the same ids in the same order.

    Each request is ranked by sha256(seed, id) and the n lowest are kept in rank order, so the draw
    does not depend on Python's random module (stable across versions) and adding lines to the file
    changes a sample only where a new line ranks among the n lowest. With n at or above the number
    of requests, all are kept, in rank order.
    """
    if n < 1:
        raise WorkloadError(f"--sample must be at least 1 (got {n})")
    ranked = sorted(workload.requests, key=lambda r: _rank(seed, r.id))
    return workload.model_copy(update={
        "requests": ranked[:n],
        "sample": SampleInfo(n=n, seed=seed, of_requests=len(workload.requests)),
    })


def request_slices(requests: list[WorkloadRequest], concurrency: int, batches: int | None = None
                   ) -> list[list[WorkloadRequest]]:
    """The batches of a cell: each of ``concurrency`` streams takes the next request, in workload order.

    ``batches`` None covers every request once (ceil(N / concurrency) batches). The sequence wraps
    around, so every batch has exactly ``concurrency`` requests (the last one refills from the start).
    Give both sides the same slices: the A/B compares the same traffic.
    """
    if concurrency < 1 or not requests:
        raise ValueError("request_slices needs concurrency >= 1 and at least one request")
    n = len(requests)
    count = -(-n // concurrency) if batches is None else batches
    return [[requests[(b * concurrency + i) % n] for i in range(concurrency)] for b in range(count)]


def open_workload(path: Path | str, settings: Settings, *, sample_n: int | None = None, seed: int = 0,
                  strict: bool = False) -> Workload:
    """The one way the CLI and the page load a workload: the settings' limits, then an optional sample."""
    workload = load_workload(path, max_bytes=settings.workload_max_bytes, max_prompt_chars=settings.max_prompt_chars,
                             strict=strict)
    return sample(workload, sample_n, seed) if sample_n is not None else workload
