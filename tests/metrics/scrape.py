"""Scraping a node's /metrics as Prometheus would: a real HTTP GET, prometheus_client's text parser.

`Scrape` indexes the parsed samples by (sample name, labels); `value()` reads one, `total()`
sums a sample name over every label set matching the given labels. `wait_for` re-scrapes until
a condition holds (bounded; a condition, never a sleep, decides).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

METRICS_LINE = re.compile(r"serving Prometheus metrics on (http://\S+)")


class Scrape:
    def __init__(self, text: str, content_type: str) -> None:
        self.text = text
        self.content_type = content_type
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for f in self.families.values():
            for s in f.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(self, name: str, **labels: str) -> float:
        """The sample with exactly these labels; KeyError names what exists."""
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            have = sorted(dict(k[1]) for k in self.samples if k[0] == name)[:10]
            raise KeyError(f"no sample {name}{labels}; with that name: {have}")
        return self.samples[key]

    def get(self, name: str, default: float = 0.0, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), default)

    def total(self, name: str, **labels: str) -> float:
        """Sum over every sample of `name` whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [dict(ls) for (n, ls) in self.samples if n == name]


def scrape(url: str, timeout_s: float = 15.0) -> Scrape:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        assert resp.status == 200
        return Scrape(resp.read().decode(), resp.headers.get("Content-Type", ""))


def wait_for(url: str, condition: Callable[[Scrape], bool], timeout_s: float = 20.0, what: str = "") -> Scrape:
    deadline = time.monotonic() + timeout_s
    while True:
        s = scrape(url)
        if condition(s):
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics never showed {what or condition}")
        time.sleep(0.05)


def metrics_url_from_log(path: Path) -> str:
    m = METRICS_LINE.search(path.read_text(errors="replace"))
    assert m, f"no metrics line in {path}"
    return m.group(1)
