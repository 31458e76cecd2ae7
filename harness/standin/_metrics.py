"""The stand-in's Prometheus /metrics: vLLM's names and labels from the captured metrics files,
its counters and histograms (``Counters``), rendered per scrape.
"""

from __future__ import annotations

import bisect
import re

from harness.standin._behavior import FIXTURES, StandinBehavior


class _Hist:
    def __init__(self, bounds: list[float]) -> None:
        self.bounds, self._in_bucket, self.n, self.sum = bounds, [0] * (len(bounds) + 1), 0, 0.0

    def observe(self, v: float) -> None:
        self.observe_many(v, 1)

    def observe_many(self, v: float, times: int) -> None:
        if times > 0:
            self.n += times
            self.sum += v * times
            self._in_bucket[bisect.bisect_left(self.bounds, v)] += times

    def cumulative(self, i: int) -> int:
        """Observations <= bounds[i] (Prometheus buckets are cumulative)."""
        return sum(self._in_bucket[: i + 1])


_SAMPLE = re.compile(r"^([^\s{]+)(?:\{([^}]*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_HISTS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_time_per_output_token_seconds",  # each finished request's decode time per token
    "vllm:request_queue_time_seconds",  # each finished request's wait for a slot (Truth.queue_time_s)
)


class Counters:
    """Server-wide Prometheus state; rendered over a captured 'before' file as template."""

    def __init__(self) -> None:
        self.templates = {
            spec: (FIXTURES / f"metrics-{'speculative' if spec else 'baseline'}-before.txt").read_text()
            for spec in (False, True)
        }
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos: list[int] = []
        self.prompt_tokens = self.generation_tokens = 0
        self.success: dict[str, int] = {}
        self.hists: dict[str, _Hist] = {}
        for name in _HISTS:
            bounds = []
            for line in self.templates[False].splitlines():
                m = _SAMPLE.match(line)
                if m and m.group(1) == name + "_bucket":
                    le = dict(_LABEL.findall(m.group(2)))["le"]
                    bounds.append(float(le))
            self.hists[name] = _Hist(bounds)

    def add_step(self, accepted: int, k: int) -> None:
        self.drafts += 1
        self.draft_tokens += k
        self.accepted += accepted
        if len(self.per_pos) < k:
            self.per_pos += [0] * (k - len(self.per_pos))
        for p in range(accepted):
            self.per_pos[p] += 1

    def render(self, b: StandinBehavior, running: int, kv_tokens: float, waiting: int = 0) -> str:
        k = b.num_spec_tokens
        per_pos = self.per_pos + [0] * max(0, k - len(self.per_pos))
        values: dict[str, float] = {
            "vllm:spec_decode_num_drafts_total": self.drafts,
            "vllm:spec_decode_num_draft_tokens_total": self.draft_tokens,
            "vllm:spec_decode_num_accepted_tokens_total": self.accepted,
            "vllm:num_requests_running": running,
            "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": min(1.0, kv_tokens / b.kv_cache_tokens),
            "vllm:prompt_tokens_total": self.prompt_tokens,
            "vllm:generation_tokens_total": self.generation_tokens,
            "vllm:num_preemptions_total": b.preemptions_total,
        }
        for name, h in self.hists.items():
            values[name + "_count"] = h.n
            values[name + "_sum"] = h.sum
        out: list[str] = []
        for line in self.templates[b.speculative].splitlines():
            m = _SAMPLE.match(line)
            if not m:
                out.append(line)
                continue
            name, labels_s, value = m.group(1), m.group(2) or "", m.group(3)
            labels = dict(_LABEL.findall(labels_s))
            labels_s = labels_s.replace('model_name="smollm2"', f'model_name="{b.model}"')
            if "per_pos" in name:
                # One series per draft position 0..k-1 (the template has k=4).
                if labels.get("position") != "0":
                    continue
                for p in range(k):
                    lab = labels_s.replace('position="0"', f'position="{p}"')
                    pv = per_pos[p] if name.endswith("_total") else float(value)
                    out.append(f"{name}{{{lab}}} {float(pv)!r}")
                continue
            if name == "vllm:request_success_total":
                v: float | None = self.success.get(labels.get("finished_reason", ""), 0)
            elif name.endswith("_bucket") and name[: -len("_bucket")] in self.hists:
                h = self.hists[name[: -len("_bucket")]]
                le = labels["le"]
                v = h.n if le == "+Inf" else h.cumulative(h.bounds.index(float(le)))
            else:
                v = values.get(name)
            out.append(f"{name}{{{labels_s}}} {float(v)!r}" if v is not None else
                       f"{name}{{{labels_s}}} {value}" if labels_s else line)
        return "\n".join(out) + "\n"

