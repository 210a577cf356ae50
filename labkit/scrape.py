"""Read a Prometheus ``/metrics`` page into numbers: the one parser the mock and engines share.

The mock, llama.cpp's ``llama-server --metrics`` and vLLM all export Prometheus text; what
differs is the names. :func:`samples` keys every sample by name and labels; :func:`sum_first`
sums one metric over its label sets under the first of several names that the server exports,
so one call reads "requests in progress" from any of them (see
``labkit.engine.RUNNING_GAUGES``).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["exported_names", "samples", "sum_first"]


def samples(text: str) -> dict[str, float]:
    """Every sample, keyed ``name`` or ``name{label="value",...}``; ``_created`` left out.

    Counters appear under their ``_total`` names.
    """
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # creation timestamps: not a measurement
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            found[key] = float(sample.value)
    return found


def sum_first(text: str, names: tuple[str, ...]) -> tuple[str, float] | None:
    """The first of ``names`` the page exports and its sum over every label set, or None.

    A family that is declared but has no samples yet counts as exported, with 0.
    """
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for name in {family.name, f"{family.name}_total"} & set(names):
            sums.setdefault(name, 0.0)
        for sample in family.samples:
            if sample.name in names:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    for name in names:
        if name in sums:
            return name, sums[name]
    return None


def exported_names(text: str) -> list[str]:
    """The metric families the page declares, sorted (for an error that says what was there)."""
    return sorted(family.name for family in text_string_to_metric_families(text))
